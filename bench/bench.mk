# Benchmarks and the long fault tests. Included from the Makefile (`-include bench/*.mk`).
#
#   make bench   -> every benchmark (~10 min on 2 cores); a markdown table on stdout and
#                   bench/RESULTS.md with the machine and versions it ran on
#   make soak    -> tests/test_faults.py with many more iterations (TOKEN_RESOURCE_SOAK=1)

BENCH_ARGS ?=
SOAK_ARGS ?=

.PHONY: bench soak

bench: $(NEWEST)/.installed
	$(NEWEST)/bin/python -m bench $(BENCH_ARGS)

soak: $(OLDEST)/.installed $(NEWEST)/.installed
	TOKEN_RESOURCE_SOAK=1 $(OLDEST)/bin/python -m pytest tests/test_faults.py -o timeout=3600 $(SOAK_ARGS)
	TOKEN_RESOURCE_SOAK=1 $(NEWEST)/bin/python -m pytest tests/test_faults.py -o timeout=3600 $(SOAK_ARGS)
