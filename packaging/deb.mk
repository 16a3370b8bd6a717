# Debian package and the system tests that install it into booted Debian 12 and
# Debian 13 containers. Included from the Makefile (`-include packaging/*.mk`).
#
#   make deb                          -> dist/token-resource_<version>_all.deb (+ lintian)
#   make deb DEB_VERSION=0.1.0+test1  -> same tree, another version (upgrade tests)
#   make system-test                  -> tests/system (root; see packaging/README-system-tests.md)
#
# The version comes from pyproject.toml's [project].version. The package is
# built in a copy of the tree under build/deb/, where packaging/debian becomes
# debian/ and debian/changelog is generated; an overridden DEB_VERSION is also
# written into that copy's pyproject.toml, so `token-resource --version` agrees
# (it must then be a valid PEP 440 version too, e.g. 0.1.0+test1).

PYPROJECT_VERSION := $(shell sed -n '/^\[project\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' pyproject.toml)
# requires-python (">=3.9") becomes the source's X-Python3-Version, from which
# dh_python3 writes the python3 floor into Depends, next to the libraries' floors
# that it takes from [project].dependencies (debian/py3dist-overrides).
PYPROJECT_REQUIRES_PYTHON := $(shell sed -n '/^\[project\]/,/^\[/s/^requires-python *= *"\([^"]*\)".*/\1/p' pyproject.toml)
DEB_VERSION ?= $(PYPROJECT_VERSION)
DEB_LINT ?= yes
DEB_BUILD_DIR := build/deb/$(DEB_VERSION)
DEB_SRC := $(DEB_BUILD_DIR)/token-resource-$(DEB_VERSION)
DEB_DIST ?= dist
DEB_FILE := $(DEB_DIST)/token-resource_$(DEB_VERSION)_all.deb
DEB_MAINTAINER := $(shell sed -n 's/^Maintainer: //p' packaging/debian/control)
# Debian's own python3, pybuild and dpkg tools, never a pyenv shim or a venv.
DEB_ENV := env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV -u PYENV_VERSION \
	PATH=/usr/sbin:/usr/bin:/sbin:/bin
SYSTEM_TEST_PYTHON ?= $(NEWEST)/bin/python
SYSTEM_TEST_ARGS ?=

.PHONY: deb system-rootfs system-test

deb:
	@test -n "$(DEB_VERSION)" || { echo "deb: no [project].version in pyproject.toml" >&2; exit 1; }
	@for f in etc/token-resource.toml systemd/token-resource.service README.md; do \
		test -f $$f || { echo "deb: $$f is missing" >&2; exit 1; }; done
	rm -rf $(DEB_BUILD_DIR)
	mkdir -p $(DEB_SRC)/packaging $(DEB_DIST)
	cp -r agent etc systemd pyproject.toml README.md $(DEB_SRC)/
	if [ -d packaging/man ]; then cp -r packaging/man $(DEB_SRC)/packaging/; fi
	# The alerts and the dashboard, for Prometheus and Grafana: the files dh_installexamples
	# installs, named once (debian/token-resource.examples).
	cp --parents $$(cat packaging/debian/token-resource.examples) $(DEB_SRC)/
	cp packaging/license_for_setuptools.py $(DEB_SRC)/packaging/
	cp -r packaging/debian $(DEB_SRC)/debian
	find $(DEB_SRC) \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
	sed -i '/^\[project\]/,/^\[/s/^version *= *".*"/version = "$(DEB_VERSION)"/' $(DEB_SRC)/pyproject.toml
	if [ -n "$(PYPROJECT_REQUIRES_PYTHON)" ]; then \
		sed -i '/^Source:/a X-Python3-Version: $(PYPROJECT_REQUIRES_PYTHON)' $(DEB_SRC)/debian/control; fi
	printf '%s\n' \
		'token-resource ($(DEB_VERSION)) unstable; urgency=medium' '' \
		'  * Release $(DEB_VERSION), built from pyproject.toml.' '' \
		' -- $(DEB_MAINTAINER)  $(shell date -R)' > $(DEB_SRC)/debian/changelog
	cd $(DEB_SRC) && $(DEB_ENV) dpkg-buildpackage --build=full --no-sign -j1 >../build.log 2>&1 \
		|| { tail -n 60 ../build.log >&2; echo "deb: build failed, log in $(DEB_BUILD_DIR)/build.log" >&2; exit 1; }
	cp $(DEB_BUILD_DIR)/token-resource_$(DEB_VERSION)_all.deb $(DEB_FILE)
	if [ "$(DEB_LINT)" = yes ]; then \
		tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		$(DEB_ENV) TMPDIR=$$tmp lintian --fail-on warning \
			$(DEB_BUILD_DIR)/token-resource_$(DEB_VERSION)_*.changes; fi
	@echo "built $(DEB_FILE)"

# Needs root and the host packages in packaging/README-system-tests.md. Each suite's
# rootfs is cached under ${XDG_CACHE_HOME:-$HOME/.cache}/token-resource-tests/; the
# newer version for the upgrade test is built by the tests themselves.
# The suites' rootfs tarballs (the cache above), built where missing before the tests start:
# outside their time limits, and in make test from the start, beside the unit runs.
system-rootfs: $(NEWEST)/.installed
	$(SYSTEM_TEST_PYTHON) -m tests.system.harness

# The package the upgrade tests install over this one: the same tree, a newer version (the system
# tests' booted containers and tests/node's host agent both take it).
UPGRADE_DEB_VERSION := $(PYPROJECT_VERSION)+upgrade1
UPGRADE_DEB_FILE := $(DEB_DIST)/token-resource_$(UPGRADE_DEB_VERSION)_all.deb
.PHONY: upgrade-deb
upgrade-deb:
	$(MAKE) --no-print-directory -f packaging/deb.mk deb DEB_VERSION=$(UPGRADE_DEB_VERSION) DEB_LINT=no

# The packages and the image under test, built once for both the system tests and tests/node.
PACKAGES_UNDER_TEST = TOKEN_RESOURCE_DEB=$(CURDIR)/$(DEB_FILE) \
	TOKEN_RESOURCE_UPGRADE_DEB=$(CURDIR)/$(UPGRADE_DEB_FILE) \
	TOKEN_RESOURCE_IMAGE=$(CURDIR)/$(IMAGE_FILE)

system-test: deb upgrade-deb image system-rootfs $(NEWEST)/.installed $(VENV_DIR)/ansible/.installed
	$(call run_pytest,$(SYSTEM_TEST_PYTHON),$(PACKAGES_UNDER_TEST),-p no:cacheprovider tests/system $(SYSTEM_TEST_ARGS))
