# Self-contained packages for hosts whose own python3 libraries are too old (Debian 11,
# Ubuntu 22.04, Amazon Linux 2023, EL9 without EPEL): token-resource-bundled carries
# grpcio, protobuf, watchdog, sdnotify (and tomli before Python 3.11) as PyPI's manylinux
# wheels in /usr/lib/token-resource/site-packages, with the agent itself, and needs only
# the target's /usr/bin/python3, systemd and libc. Included from the Makefile.
#
#   make bundled-deb                          -> dist/python3.9/token-resource-bundled_<version>_amd64.deb
#   make bundled-deb BUNDLED_PYTHON=3.10      -> the same for Ubuntu 22.04's Python
#   make bundled-rpm BUNDLED_PYTHON=3.9       -> dist/python3.9/token-resource-bundled-<version>-1.x86_64.rpm (EL9)
#   make bundled-deb BUNDLED_ARCH=arm64       -> .../token-resource-bundled_<version>_arm64.deb (the aarch64 wheels)
#
# One build per target Python version (the wheels' ABI, cpXY) and architecture: Debian 11
# and EL9 3.9, Ubuntu 22.04 3.10, Amazon Linux 2023 3.9. BUNDLED_ARCH=arm64 takes the
# manylinux2014_aarch64 wheels instead (nothing is compiled, so the build host's own
# architecture does not matter): the .deb is built with `dpkg-buildpackage --host-arch
# arm64`, the .rpm with `rpmbuild --target aarch64`, both on an amd64 host. The amd64
# packages are tested; the arm64 ones were built here but have never run.

BUNDLED_PYTHON ?= 3.9
BUNDLED_ARCH ?= amd64
BUNDLED_VERSION ?= $(shell sed -n '/^\[project\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' pyproject.toml)
BUNDLED_DIST ?= dist/python$(BUNDLED_PYTHON)
BUNDLED_LINT ?= yes
# Any pip will do: it only downloads wheels and installs them into a directory for the
# target (--platform/--python-version), never for itself.
BUNDLED_PIP ?= $(firstword $(wildcard $(CURDIR)/.venv/newest/bin/python) python3) -m pip
BUNDLED_PRIVATE_DIR := /usr/lib/token-resource/site-packages

bundled_platform = $(if $(filter amd64,$(1)),manylinux2014_x86_64,$(if $(filter arm64,$(1)),manylinux2014_aarch64,$(error BUNDLED_ARCH must be amd64 or arm64)))
BUNDLED_PYTAG := $(subst .,,$(BUNDLED_PYTHON))
BUNDLED_PYNEXT := $(word 1,$(subst ., ,$(BUNDLED_PYTHON))).$(shell echo $$(( $(word 2,$(subst ., ,$(BUNDLED_PYTHON))) + 1 )))
BUNDLED_BUILD ?= build/bundled/$(BUNDLED_VERSION)-py$(BUNDLED_PYTAG)-$(BUNDLED_ARCH)
BUNDLED_STAGE := $(BUNDLED_BUILD)/stage
BUNDLED_DEB_SRC := $(BUNDLED_BUILD)/deb/token-resource-bundled-$(BUNDLED_VERSION)
BUNDLED_DEB_FILE := $(BUNDLED_DIST)/token-resource-bundled_$(BUNDLED_VERSION)_$(BUNDLED_ARCH).deb
BUNDLED_ENV := env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV -u PYENV_VERSION \
	PATH=/usr/sbin:/usr/bin:/sbin:/bin

.PHONY: bundled-stage bundled-deb bundled-rpm

# The staged tree: site-packages/ (the wheels and the agent, installed for the target),
# bin/token-resource (the launcher), and the native package's config, unit and man pages.
bundled-stage:
	@test -n "$(BUNDLED_VERSION)" || { echo "bundled: no [project].version in pyproject.toml" >&2; exit 1; }
	rm -rf $(BUNDLED_BUILD)
	mkdir -p $(BUNDLED_STAGE)/bin $(BUNDLED_BUILD)/wheels $(BUNDLED_BUILD)/src
	cp -r agent pyproject.toml README.md $(BUNDLED_BUILD)/src/
	find $(BUNDLED_BUILD)/src \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
	sed -i '/^\[project\]/,/^\[/s/^version *= *".*"/version = "$(BUNDLED_VERSION)"/' $(BUNDLED_BUILD)/src/pyproject.toml
	# Pure-Python wheels built here: the agent, and sdnotify (published as an sdist only).
	$(BUNDLED_PIP) wheel --quiet --no-deps --wheel-dir $(BUNDLED_BUILD)/wheels \
		$(abspath $(BUNDLED_BUILD))/src "$$(grep '^sdnotify==' packaging/bundled/requirements.txt)"
	awk -v minor=$(word 2,$(subst ., ,$(BUNDLED_PYTHON))) '!(/^tomli==/ && minor >= 11)' \
		packaging/bundled/requirements.txt > $(BUNDLED_BUILD)/requirements.txt
	$(BUNDLED_PIP) install --quiet --no-compile --only-binary=:all: \
		--target $(BUNDLED_STAGE)/site-packages --find-links $(BUNDLED_BUILD)/wheels \
		--platform $(call bundled_platform,$(BUNDLED_ARCH)) --implementation cp \
		--python-version $(BUNDLED_PYTHON) --abi cp$(BUNDLED_PYTAG) \
		-r $(BUNDLED_BUILD)/requirements.txt token-resource==$(BUNDLED_VERSION)
	# Exactly the pinned set and the agent: nothing pip resolved besides.
	cd $(BUNDLED_STAGE)/site-packages && ls -d *.dist-info | sed 's/-[^-]*\.dist-info$$//' \
		| tr 'A-Z_' 'a-z-' | sort > ../installed.txt
	{ sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' $(BUNDLED_BUILD)/requirements.txt; echo token-resource; } \
		| tr 'A-Z_' 'a-z-' | sort | diff -u - $(BUNDLED_STAGE)/installed.txt
	rm $(BUNDLED_STAGE)/installed.txt
	# Console scripts written for the build's Python (token-resource, watchmedo): the
	# launcher below replaces them.
	rm -rf $(BUNDLED_STAGE)/site-packages/bin
	# protobuf's wheel marks its modules executable; nothing in there is run directly.
	find $(BUNDLED_STAGE)/site-packages -type f -exec chmod 644 {} +
	sed -e 's|@PYTHON_VERSION@|$(BUNDLED_PYTHON)|' -e 's|@PRIVATE_DIR@|$(BUNDLED_PRIVATE_DIR)|' \
		packaging/bundled/token-resource.in > $(BUNDLED_STAGE)/bin/token-resource
	chmod 755 $(BUNDLED_STAGE)/bin/token-resource
	mkdir -p $(BUNDLED_STAGE)/etc $(BUNDLED_STAGE)/systemd $(BUNDLED_STAGE)/packaging
	cp etc/token-resource.toml $(BUNDLED_STAGE)/etc/
	cp systemd/token-resource.service $(BUNDLED_STAGE)/systemd/
	cp -r packaging/man $(BUNDLED_STAGE)/packaging/

# debhelper on the staged tree: the native package's maintainer-script behaviour
# (dh_installsystemd: enabled and started on install, restarted on upgrade, stopped on
# removal; the same postrm for purge) plus byte-compiling the private directory.
bundled-deb: bundled-stage
	rm -rf $(dir $(BUNDLED_DEB_SRC))
	mkdir -p $(dir $(BUNDLED_DEB_SRC)) $(BUNDLED_DIST)
	cp -r $(BUNDLED_STAGE) $(BUNDLED_DEB_SRC)
	cp -r packaging/bundled/debian $(BUNDLED_DEB_SRC)/debian
	cp packaging/debian/token-resource.postrm $(BUNDLED_DEB_SRC)/debian/token-resource-bundled.postrm
	sed -i 's|@PYTHON_DEPENDS@|python3 (>= $(BUNDLED_PYTHON)~), python3 (<< $(BUNDLED_PYNEXT))|' \
		$(BUNDLED_DEB_SRC)/debian/control
	printf '%s\n' \
		'token-resource-bundled ($(BUNDLED_VERSION)) unstable; urgency=medium' '' \
		'  * Release $(BUNDLED_VERSION) for Python $(BUNDLED_PYTHON), built from pyproject.toml.' '' \
		' -- $(shell sed -n 's/^Maintainer: //p' packaging/bundled/debian/control)  $(shell date -R)' \
		> $(BUNDLED_DEB_SRC)/debian/changelog
	cd $(BUNDLED_DEB_SRC) && $(BUNDLED_ENV) dpkg-buildpackage --build=binary --no-sign -j1 \
		$(if $(filter-out $(shell dpkg --print-architecture),$(BUNDLED_ARCH)),--host-arch $(BUNDLED_ARCH)) \
		>../build.log 2>&1 \
		|| { tail -n 60 ../build.log >&2; echo "bundled-deb: build failed, log in $(dir $(BUNDLED_DEB_SRC))build.log" >&2; exit 1; }
	cp $(dir $(BUNDLED_DEB_SRC))token-resource-bundled_$(BUNDLED_VERSION)_$(BUNDLED_ARCH).deb $(BUNDLED_DEB_FILE)
	if [ "$(BUNDLED_LINT)" = yes ]; then \
		tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		$(BUNDLED_ENV) TMPDIR=$$tmp lintian --fail-on error,warning $(BUNDLED_DEB_FILE); fi
	@echo "built $(BUNDLED_DEB_FILE)"

# rpmbuild on the staged tree (its tarball is the source), for the rpm architecture of
# BUNDLED_ARCH. On Debian's rpmbuild: no build-dependency database (--nodeps); the spec
# turns off stripping and byte-compiling itself.
BUNDLED_RPM_ARCH := $(if $(filter arm64,$(BUNDLED_ARCH)),aarch64,x86_64)
BUNDLED_RPM_TOPDIR ?= $(abspath $(BUNDLED_BUILD))/rpmbuild
BUNDLED_RPM_FILE := $(BUNDLED_DIST)/token-resource-bundled-$(BUNDLED_VERSION)-1.$(BUNDLED_RPM_ARCH).rpm

bundled-rpm: bundled-stage
	@command -v rpmbuild >/dev/null || { echo "bundled-rpm: rpmbuild is required (apt-get install rpm)" >&2; exit 1; }
	rm -rf $(BUNDLED_RPM_TOPDIR)
	mkdir -p $(BUNDLED_RPM_TOPDIR)/SOURCES $(BUNDLED_RPM_TOPDIR)/SPECS $(BUNDLED_DIST)
	tar -C $(BUNDLED_STAGE) --sort=name --owner=0 --group=0 --numeric-owner \
		--transform 's,^\.,token-resource-bundled-$(BUNDLED_VERSION),' \
		-czf $(BUNDLED_RPM_TOPDIR)/SOURCES/token-resource-bundled-$(BUNDLED_VERSION).tar.gz .
	{ echo '%global pkg_version $(BUNDLED_VERSION)'; echo '%global bundled_python $(BUNDLED_PYTHON)'; \
		cat packaging/bundled/token-resource-bundled.spec; } \
		> $(BUNDLED_RPM_TOPDIR)/SPECS/token-resource-bundled.spec
	$(BUNDLED_ENV) rpmbuild -bb --quiet --define '_topdir $(BUNDLED_RPM_TOPDIR)' \
		--target $(BUNDLED_RPM_ARCH) $(if $(wildcard /etc/debian_version),--nodeps) \
		$(BUNDLED_RPM_TOPDIR)/SPECS/token-resource-bundled.spec
	cp $(BUNDLED_RPM_TOPDIR)/RPMS/$(BUNDLED_RPM_ARCH)/token-resource-bundled-$(BUNDLED_VERSION)-1*.$(BUNDLED_RPM_ARCH).rpm \
		$(BUNDLED_RPM_FILE)
	@echo "built $(BUNDLED_RPM_FILE)"
