# One command per chore. Interpreters: the oldest supported Python (RHEL 9's 3.9)
# and the newest one here; each gets its own virtualenv with PyPI's newest libraries.
find_python = $(firstword $(foreach p,$(1),$(shell $(p) -c '' 2>/dev/null && echo $(p))))
PYTHON_OLDEST ?= $(call find_python,python3.9 $(wildcard $(HOME)/.pyenv/versions/3.9*/bin/python3.9))
PYTHON_NEWEST ?= $(call find_python,python3.13 $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13))
VENV_DIR ?= .venv
OLDEST := $(VENV_DIR)/oldest
NEWEST := $(VENV_DIR)/newest
PYTEST_ARGS ?=

.PHONY: all demo test lint unit proto clean

all: test

$(VENV_DIR)/%/.installed: pyproject.toml
	@py=$(if $(filter oldest,$*),$(PYTHON_OLDEST),$(PYTHON_NEWEST)); \
	[ -n "$$py" ] || { echo "make: no Python for the $* virtualenv (set PYTHON_OLDEST/PYTHON_NEWEST)" >&2; exit 1; }; \
	$$py -m venv $(VENV_DIR)/$* && \
	$(VENV_DIR)/$*/bin/pip install --quiet --upgrade pip && \
	$(VENV_DIR)/$*/bin/pip install --quiet -e '.[test]' && touch $@

demo: $(NEWEST)/.installed
	$(NEWEST)/bin/python -m tests.demo

# mypy runs under the oldest Python: it checks the code as Python 3.9 sees it.
lint: $(OLDEST)/.installed $(NEWEST)/.installed
	$(NEWEST)/bin/ruff check agent tests bench packaging/ansible packaging/image
	$(NEWEST)/bin/ruff format --check agent tests bench packaging/ansible packaging/image
	$(OLDEST)/bin/mypy

# Everything but the system tests, under both Pythons.
unit: $(OLDEST)/.installed $(NEWEST)/.installed
	$(OLDEST)/bin/python -m pytest --ignore=tests/system $(PYTEST_ARGS)
	$(NEWEST)/bin/python -m pytest --ignore=tests/system $(PYTEST_ARGS)

test: lint unit system-test

# Regenerate the protocol module with protoc 3.21 (grpcio-tools 1.51): its output imports
# on Debian 12's python3-protobuf 3.21 and on current PyPI releases; newer generators' does not.
proto:
	python3.11 -m venv $(VENV_DIR)/protoc
	$(VENV_DIR)/protoc/bin/pip install --quiet 'grpcio-tools==1.51.3'
	cd agent && ../$(VENV_DIR)/protoc/bin/python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. \
		token_resource/protocol/deviceplugin.proto token_resource/protocol/podresources.proto

clean:
	rm -rf $(VENV_DIR) dist build agent/*.egg-info

-include packaging/*.mk packaging/ansible/ansible.mk
-include bench/*.mk
