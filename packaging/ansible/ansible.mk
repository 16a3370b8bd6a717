# The Ansible role and playbook (packaging/ansible). Included from the top-level
# Makefile; run from the repository root.
#
#   make ansible-venv   -> .venv/ansible: ansible-core and ansible-lint from PyPI, for the
#                          lint and for tests/system/test_ansible.py (which fails without it)
#   make ansible-lint   -> ansible-lint with the production profile, offline (no Galaxy)
#
# The virtualenv uses the newest Python (ansible-core's controller needs a recent one);
# PYTHON_NEWEST and VENV_DIR come from the Makefile.
ANSIBLE_VENV := $(VENV_DIR)/ansible
ANSIBLE_PACKAGES := 'ansible-core>=2.16' 'ansible-lint>=24.2'

.PHONY: ansible-venv ansible-lint

$(ANSIBLE_VENV)/.installed: packaging/ansible/ansible.mk
	@py=$(PYTHON_NEWEST); \
	[ -n "$$py" ] || { echo "make: no Python for the ansible virtualenv (set PYTHON_NEWEST)" >&2; exit 1; }; \
	$(call make_venv,$$py,$(ANSIBLE_VENV)) && \
	$(ANSIBLE_VENV)/bin/pip install --quiet --upgrade pip && \
	$(ANSIBLE_VENV)/bin/pip install --quiet --upgrade $(ANSIBLE_PACKAGES) && touch $@

ansible-venv: $(ANSIBLE_VENV)/.installed

# ANSIBLE_HOME: ansible-lint would otherwise create ~/.ansible.
ansible-lint: $(ANSIBLE_VENV)/.installed
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cd packaging/ansible && \
	PATH=$(CURDIR)/$(ANSIBLE_VENV)/bin:$$PATH ANSIBLE_HOME=$$tmp ansible-lint
