# One command per chore. Interpreters: the oldest supported Python (RHEL 9's 3.9)
# and the newest one here; each gets its own virtualenv with PyPI's newest libraries.
find_python = $(firstword $(foreach p,$(1),$(shell $(p) -c '' 2>/dev/null && echo $(p))))
PYTHON_OLDEST ?= $(call find_python,python3.9 $(wildcard $(HOME)/.pyenv/versions/3.9*/bin/python3.9))
PYTHON_NEWEST ?= $(call find_python,python3.13 $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13))
VENV_DIR ?= .venv
OLDEST := $(VENV_DIR)/oldest
NEWEST := $(VENV_DIR)/newest
# RHEL 9's own library set (packaging/README.md) under the oldest Python; watchdog, which RHEL 9
# lacks, at the oldest version the agent supports. The test tools install beside these pins
# (a constraints file) and never upgrade them.
RHEL9 := $(VENV_DIR)/rhel9
RHEL9_PINS := grpcio==1.46.3 protobuf==3.14.0 sdnotify==0.3.2 tomli==2.0.1 watchdog==2.2.1
PYTEST_ARGS ?=
# The unit suite's workers (pytest-xdist) in each virtualenv's run: its tests mostly wait on
# sockets, agents and timers, so more of them than cores. 6 were the fastest for one run alone
# (3 min 15 s, 4: 3 min 59 s; ../shared/docs/suite-timing.md); make test runs the system tests
# and the Go builds beside it, so 4 (not compared there). loadgroup keeps the tests of one
# xdist_group on one worker (each group says why).
UNIT_WORKERS ?= 4
UNIT_ARGS = -n $(UNIT_WORKERS) --dist loadgroup -p no:cacheprovider \
	--ignore=tests/system --ignore=tests/kube --ignore=tests/node $(PYTEST_ARGS)
UNIT_VENVS := oldest newest rhel9
# How many of make test's stages run at once (below).
TEST_JOBS ?= 4
# venv's ensurepip under Python 3.9 leaves a copy of pip's CA bundle (tmp*cacert.pem) in TMPDIR
# for good: it runs in a scratch TMPDIR of its own, removed afterwards.
make_venv = { scratch=$$(mktemp -d) && TMPDIR=$$scratch $(1) -m venv $(2); status=$$?; rm -rf "$$scratch"; [ $$status = 0 ]; }
# $(call run_pytest,PYTHON,ENV,ARGS): pytest with a base directory of its own, removed afterwards.
# pytest keeps only the three newest numbered base directories under /tmp/pytest-of-<user>, so
# a shared one can vanish under this run when another pytest starts on the machine.
run_pytest = base=$$(mktemp -d "$${TMPDIR:-/tmp}/token-resource-pytest.XXXXXX") && \
	{ env $(2) $(1) -m pytest --basetemp="$$base/run" $(3); status=$$?; rm -rf "$$base"; exit $$status; }

.PHONY: all demo test quick lint unit $(addprefix unit-,$(UNIT_VENVS)) proto proto-check prometheus-rule diagrams \
	clean

all: test

$(VENV_DIR)/%/.installed: pyproject.toml
	@py=$(if $(filter oldest,$*),$(PYTHON_OLDEST),$(PYTHON_NEWEST)); \
	[ -n "$$py" ] || { echo "make: no Python for the $* virtualenv (set PYTHON_OLDEST/PYTHON_NEWEST)" >&2; exit 1; }; \
	$(call make_venv,$$py,$(VENV_DIR)/$*) && \
	$(VENV_DIR)/$*/bin/pip install --quiet --upgrade pip && \
	$(VENV_DIR)/$*/bin/pip install --quiet -e '.[test]' && touch $@

$(RHEL9)/.installed: pyproject.toml
	@[ -n "$(PYTHON_OLDEST)" ] || { echo "make: no Python 3.9 for the rhel9 virtualenv (set PYTHON_OLDEST)" >&2; exit 1; }
	$(call make_venv,$(PYTHON_OLDEST),$(RHEL9))
	printf '%s\n' $(RHEL9_PINS) > $(RHEL9)/constraints.txt
	$(RHEL9)/bin/pip install --quiet --upgrade pip
	$(RHEL9)/bin/pip install --quiet -c $(RHEL9)/constraints.txt $(RHEL9_PINS) -e '.[test]'
	touch $@

demo: $(NEWEST)/.installed
	$(NEWEST)/bin/python -m tests.demo

# What ruff checks (mypy's list is pyproject.toml's).
PYTHON_SOURCES := agent tests bench packaging/ansible packaging/image \
	packaging/license_for_setuptools.py
# mypy runs under the oldest Python: it checks the code as Python 3.9 sees it.
lint: $(OLDEST)/.installed $(NEWEST)/.installed
	$(NEWEST)/bin/ruff check $(PYTHON_SOURCES)
	$(NEWEST)/bin/ruff format --check $(PYTHON_SOURCES)
	$(OLDEST)/bin/mypy
	$(NEWEST)/bin/lint-imports --no-cache

# Everything but the system tests and the tests against real Kubernetes components, under both
# Pythons and under RHEL 9's libraries (and the Ansible virtualenv, which runs the role's choice
# of package in tests/packaging).
# $(call unit_run,VENV): the unit suite in one virtualenv, a recipe line of its own.
define unit_run
	$(call run_pytest,$(VENV_DIR)/$(1)/bin/python,,$(UNIT_ARGS))

endef
# The three runs one after another, in one recipe: one run's workers already take what the
# waiting tests leave of two cores, and make test runs the system tests beside them.
unit: $(foreach v,$(UNIT_VENVS),$(VENV_DIR)/$(v)/.installed) $(VENV_DIR)/ansible/.installed
	$(foreach v,$(UNIT_VENVS),$(call unit_run,$(v)))
$(addprefix unit-,$(UNIT_VENVS)): unit-%: $(VENV_DIR)/%/.installed $(VENV_DIR)/ansible/.installed
	$(call unit_run,$*)

# The inner loop: lint and the unit suite under the newest Python, side by side.
quick:
	$(MAKE) --no-print-directory -j 2 --output-sync=target lint unit-newest

# Everything, the stages side by side (TEST_JOBS at a time), each one's output printed whole
# when it ends: the Go builds of tests/kube from the start (CPU-bound, and cold the longest
# chain: niced, they got almost nothing while the tests ran), beside the lint, the unit runs and
# the system tests, which mostly wait; tests/kube once its programs are built.
test:
	$(MAKE) --no-print-directory -j $(TEST_JOBS) --output-sync=target \
		kube-programs node-containerd system-rootfs lint proto-check unit kube-test system-test \
		node-test

# protoc (3.21, from grpcio-tools 1.51) writes the typing stubs of the protocol module and its
# description of each .proto, which tests/protocol/test_protocol.py compares the modules' own
# descriptors with. The classes themselves are built at import time (protocol/descriptor.py).
PROTOC := $(VENV_DIR)/protoc/bin/python -m grpc_tools.protoc
PROTO_OUT ?= .
# Under the oldest Python, which make test has anyway (grpcio-tools 1.51 has wheels up to 3.11).
$(VENV_DIR)/protoc/.installed:
	$(call make_venv,$(PYTHON_OLDEST),$(VENV_DIR)/protoc)
	$(VENV_DIR)/protoc/bin/pip install --quiet 'grpcio-tools==1.51.3'
	touch $@

PROTO_FILES := deviceplugin podresources pluginregistration dra_v1 dra_v1beta1 \
	dra_health_v1alpha1 dra_health_v1
proto: $(VENV_DIR)/protoc/.installed
	mkdir -p $(PROTO_OUT)/agent $(PROTO_OUT)/tests/protocol
	cd agent && for name in $(PROTO_FILES); do \
		../$(PROTOC) -I. --pyi_out=$(abspath $(PROTO_OUT))/agent \
			--descriptor_set_out=$(abspath $(PROTO_OUT))/tests/protocol/$$name.desc \
			token_resource/protocol/$$name.proto || exit 1; \
	done

# Fails when the checked-in stubs or descriptor are not what protoc makes of the .proto now.
proto-check: $(VENV_DIR)/protoc/.installed
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(MAKE) -s proto PROTO_OUT=$$tmp && \
	for name in $(PROTO_FILES); do \
		cmp $$tmp/tests/protocol/$$name.desc tests/protocol/$$name.desc && \
		cmp $$tmp/agent/token_resource/protocol/$${name}_pb2.pyi \
			agent/token_resource/protocol/$${name}_pb2.pyi || exit 1; \
	done

# The metrics overlay's PrometheusRule: its own head (up to `spec:`), then the alerts' one source
# indented under it (kustomize cannot embed a file in a custom resource; tests/deploy/test_alerts.py
# fails when the two differ).
MONITORING := deploy/kubernetes/overlays/metrics/monitoring
prometheus-rule:
	{ sed -n '1,/^spec:$$/p' $(MONITORING)/prometheusrule.yaml && \
		sed 's/^\(.\)/  \1/' $(MONITORING)/token-resource.rules.yml; } > $(MONITORING)/prometheusrule.yaml.new
	mv $(MONITORING)/prometheusrule.yaml.new $(MONITORING)/prometheusrule.yaml

# The docs' pictures: each docs/diagrams/*.dot drawn by Graphviz into the .svg beside it, which the
# docs show (tests/test_diagrams.py fails when a committed picture differs from its source).
DIAGRAMS := $(patsubst %.dot,%.svg,$(wildcard docs/diagrams/*.dot))
diagrams: $(DIAGRAMS)
docs/diagrams/%.svg: docs/diagrams/%.dot
	dot -Tsvg $< -o $@

clean:
	rm -rf $(VENV_DIR) dist build agent/*.egg-info

-include packaging/*.mk packaging/ansible/ansible.mk
-include bench/*.mk
-include tests/kube/kube.mk
-include tests/node/node.mk
