# Benchmarks and the long fault tests. Included from the Makefile (`-include bench/*.mk`).
#
#   make bench   -> every benchmark (~70 min on 2 cores, 51 of them scale's); a markdown table
#                   on stdout and bench/RESULTS.md with the machine and versions it ran on (an --only
#                   run: bench/results/NAME.md, which docs/performance.md quotes)
#                   BENCH_ARGS='--only health probe-idle': the health-probe scenarios alone
#                   (~2 min); BENCH_ARGS='--only cluster-pools': the cluster-pools
#                   publisher's failover and idle cost alone (~4 min);
#                   BENCH_ARGS='--only scale': agents and the publisher against the real API
#                   server at 100, 1,000 and 5,000 Nodes kept alive by kwok (~60 min;
#                   TOKEN_RESOURCE_BENCH_SCALE_WINDOW=N seconds of steady state per size,
#                   default 900); BENCH_ARGS='--only claim-churn': what a claim's change costs
#                   the publisher at 100, 1,000 and 5,000 standing claims (~2 min);
#                   BENCH_ARGS='--only mass-restart': the fleet at 1,000 Nodes
#                   (TOKEN_RESOURCE_BENCH_MASS_RESTART_NODES=N; 100 with --quick), every real
#                   agent restarted at once, its first minute by verb and resource (~5 min);
#                   TOKEN_RESOURCE_BENCH_PROBE_IDLE_SECONDS=N sets probe-idle's window
#                   (default 60 s, 20 s with --quick)
#   make soak    -> tests/agent/test_faults.py with many more iterations (TOKEN_RESOURCE_SOAK=1)
#   make fuzz    -> every randomized test with FUZZ_SEEDS fresh seeds, and the property tests
#                   with FUZZ_EXAMPLES examples, under both Pythons; a failure prints its seed
#                   (TOKEN_RESOURCE_SEED=N replays it), to be kept in the test's @seeds(...)

BENCH_ARGS ?=
# The agent as it was before the cost per resource was cut (issue 28),
# measured beside today's and the floor in the same run.
BENCH_BEFORE ?= 6cf569d
SOAK_ARGS ?=
FUZZ_SEEDS ?= 300
FUZZ_EXAMPLES ?= 20000
FUZZ_ARGS ?=
FUZZ_TESTS = tests/agent/test_faults.py tests/config/test_config_properties.py -k 'fresh or config_properties'

.PHONY: bench soak fuzz

# The scale section runs the real control plane (tests/kube's programs) and kwok.
bench: $(NEWEST)/.installed kube-programs kwok
	TOKEN_RESOURCE_KUBE_BIN=$(KUBE_BIN) $(NEWEST)/bin/python -m bench --before $(BENCH_BEFORE) $(BENCH_ARGS)

soak: $(OLDEST)/.installed $(NEWEST)/.installed
	TOKEN_RESOURCE_SOAK=1 $(OLDEST)/bin/python -m pytest tests/agent/test_faults.py -o timeout=3600 $(SOAK_ARGS)
	TOKEN_RESOURCE_SOAK=1 $(NEWEST)/bin/python -m pytest tests/agent/test_faults.py -o timeout=3600 $(SOAK_ARGS)

fuzz: $(OLDEST)/.installed $(NEWEST)/.installed
	status=0; for venv in $(OLDEST) $(NEWEST); do \
		TOKEN_RESOURCE_FUZZ_SEEDS=$(FUZZ_SEEDS) TOKEN_RESOURCE_EXAMPLES=$(FUZZ_EXAMPLES) \
			$$venv/bin/python -m pytest $(FUZZ_TESTS) -o timeout=0 -rf $(FUZZ_ARGS) || status=1; \
	done; exit $$status
