# RPM package: `make rpm` -> dist/token-resource-<version>-1.noarch.rpm
# (and the matching .src.rpm). Included from the top-level Makefile
# (-include packaging/*.mk); run from the repository root. Host packages:
# see packaging/rpm/README.md. `make rpm-lint` runs rpmlint on the results.
# RPM_DIST and RPM_TOPDIR (rpmbuild's work tree) can be overridden; the
# tests in tests/packaging build into a temporary directory that way.

# [project].version in pyproject.toml is the only place the version lives.
RPM_VERSION := $(shell awk '/^\[/ { in_project = ($$0 == "[project]") } \
	in_project && /^version[ \t]*=/ { sub(/^[^"]*"/, ""); sub(/".*/, ""); print; exit }' pyproject.toml)
RPM_NAME := token-resource
RPM_SPEC := packaging/rpm/$(RPM_NAME).spec
RPM_DIST ?= dist
RPM_TOPDIR ?= $(CURDIR)/build/rpmbuild
RPM_TARBALL := $(RPM_TOPDIR)/SOURCES/$(RPM_NAME)-$(RPM_VERSION).tar.gz
RPM_BUILT_SPEC := $(RPM_TOPDIR)/SPECS/$(RPM_NAME).spec
RPMBUILD ?= rpmbuild
RPMLINT ?= rpmlint
# The system's tools and /usr/bin/python3 only: no virtualenv, pyenv shim or
# PYTHONPATH from the calling shell may leak into the build.
RPM_ENV := env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV -u PYENV_VERSION \
	PATH=/usr/sbin:/usr/bin:/sbin:/bin
# Debian's rpmbuild has no rpm database of build dependencies (--nodeps) and
# the distribution's python3-* libraries are not rpm packages here, so %check
# (an import test against them) is skipped; its brp-compress needs bash but
# says #!/bin/sh (dash), so it is run with bash (noarch: nothing to strip).
# On Fedora/RHEL none of this applies.
RPMBUILD_DEBIAN_FLAGS := --nodeps --without check \
	--define '__os_install_post bash /usr/lib/rpm/brp-compress %{_prefix}'
RPMBUILD_FLAGS ?= $(if $(wildcard /etc/debian_version),$(RPMBUILD_DEBIAN_FLAGS))

# RPM_TARGET=el9|fedora44|fedora45 builds here (Debian) a package laid out for that
# distribution's Python (site-packages path, python(abi) and python3.Ydist requirements) and,
# for el9, with the vendored watchdog: what tests/packaging/test_rpm_targets.py checks against
# each distribution's packages. On the distribution itself leave it empty: its macros know.
RPM_TARGET ?=
# The package's release (1 unless given): a rebuild of the same version that a repository's
# users are to take, e.g. RPM_RELEASE=2.
RPM_RELEASE ?=
RPM_TARGET_FLAGS_el9 = --define 'rhel 9' --define 'python3_version 3.9' \
	--define 'python3_version_nodots 39' --define 'python3_bytecompiler $(RPM_PYTHON_el9)'
RPM_TARGET_FLAGS_fedora44 := --define 'python3_version 3.14' --define 'python3_version_nodots 314'
RPM_TARGET_FLAGS_fedora45 := --define 'python3_version 3.15' --define 'python3_version_nodots 315'
# EL9's packages carry bytecode compiled by a Python 3.9 (the one the Makefile's oldest
# virtualenv is made with), so they install on EL9 as built: noarch, the layout and
# requirements EL9's (tests/packaging/test_rpm_targets.py), the bytecode its interpreter's.
# Fedora's targets have none (no Python 3.14 or 3.15 here): rebuild their source rpm there.
RPM_PYTHON_el9 ?= $(firstword $(foreach p,python3.9 $(wildcard $(HOME)/.pyenv/versions/3.9*/bin/python3.9),$(shell $(p) -c '' 2>/dev/null && echo $(p))))
# The wheel the EL9 build vendors (Source1; the spec checks its sha256), fetched with pip.
RPM_WATCHDOG := watchdog==6.0.0
RPM_PIP ?= python3 -m pip

.PHONY: rpm rpm-sources rpm-rebuild rpm-lint

# The source tarball holds the tree as git sees it: tracked files plus new
# files that are not ignored (so uncommitted work is packaged too), never
# dist/, build/ or virtualenvs. The spec that is built (and goes into the
# source rpm, so `rpmbuild --rebuild` works on the target release) is the
# one in the tree with the version from pyproject.toml defined on top.
rpm-sources:
	@test -n "$(RPM_VERSION)" || { echo "rpm.mk: no [project].version in pyproject.toml" >&2; exit 1; }
	@for f in etc/$(RPM_NAME).toml systemd/$(RPM_NAME).service \
		packaging/man/$(RPM_NAME).8 packaging/man/$(RPM_NAME).toml.5; do \
		test -f $$f || { echo "rpm.mk: $$f is missing" >&2; exit 1; }; done
	rm -rf $(RPM_TOPDIR)
	mkdir -p $(RPM_TOPDIR)/SOURCES $(RPM_TOPDIR)/SPECS $(RPM_TOPDIR)/BUILD $(RPM_TOPDIR)/RPMS $(RPM_TOPDIR)/SRPMS
	git ls-files -z --cached --others --exclude-standard \
		| tar --null --files-from=- --ignore-failed-read --sort=name \
			--owner=0 --group=0 --numeric-owner \
			--transform 's,^,$(RPM_NAME)-$(RPM_VERSION)/,' -czf $(RPM_TARBALL)
	{ echo '%global pkg_version $(RPM_VERSION)'; cat $(RPM_SPEC); } > $(RPM_BUILT_SPEC)
	$(if $(filter el9,$(RPM_TARGET)),$(RPM_PIP) download --quiet --no-deps --only-binary=:all: \
		--platform manylinux2014_x86_64 --python-version 3.9 \
		--dest $(RPM_TOPDIR)/SOURCES '$(RPM_WATCHDOG)')

rpm: rpm-sources
	$(if $(filter el9,$(RPM_TARGET)),@test -n "$(RPM_PYTHON_el9)" || { echo "rpm.mk: RPM_TARGET=el9 needs a Python 3.9 (set RPM_PYTHON_el9)" >&2; exit 1; })
	@command -v $(RPMBUILD) >/dev/null || { echo "rpm.mk: $(RPMBUILD) is required (apt-get install rpm)" >&2; exit 1; }
	$(RPM_ENV) $(RPMBUILD) -ba --define '_topdir $(RPM_TOPDIR)' $(RPMBUILD_FLAGS) \
		$(RPM_TARGET_FLAGS_$(RPM_TARGET)) $(if $(RPM_RELEASE),--define 'pkg_release $(RPM_RELEASE)') \
		$(RPM_BUILT_SPEC)
	mkdir -p $(RPM_DIST)
	rm -f $(RPM_DIST)/$(RPM_NAME)-$(RPM_VERSION)-*.rpm
	cp $(RPM_TOPDIR)/RPMS/noarch/$(RPM_NAME)-$(RPM_VERSION)-*.noarch.rpm \
		$(RPM_TOPDIR)/SRPMS/$(RPM_NAME)-$(RPM_VERSION)-*.src.rpm $(RPM_DIST)/
	@ls -l $(RPM_DIST)/$(RPM_NAME)-$(RPM_VERSION)-*.rpm

# The source rpm rebuilt into RPM_TOPDIR, as packaging/README.md rebuilds it on Fedora
# (`rpmbuild --rebuild`): here with Debian's flags and RPM_TARGET's definitions standing in for
# the target's macros. tests/packaging/test_rpm_targets.py holds it equal to the package built
# from the tree: the source rpm carries everything a rebuild needs.
RPM_SRPM ?= $(RPM_DIST)/$(RPM_NAME)-$(RPM_VERSION)-$(or $(RPM_RELEASE),1).src.rpm
rpm-rebuild:
	$(RPM_ENV) $(RPMBUILD) --rebuild --define '_topdir $(RPM_TOPDIR)' $(RPMBUILD_FLAGS) \
		$(RPM_TARGET_FLAGS_$(RPM_TARGET)) $(RPM_SRPM)

# rpmlint with packaging/rpm/rpmlint.toml (Fedora/RHEL conventions; each
# filter there says why). rpmlint writes to TMPDIR, and Debian's rpm keeps its
# database in $HOME/.rpmdb: point both at a private directory.
rpm-lint: rpm
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(RPM_ENV) HOME=$$tmp TMPDIR=$$tmp $(RPMLINT) --config packaging/rpm/rpmlint.toml \
		$(RPM_BUILT_SPEC) $(RPM_DIST)/$(RPM_NAME)-$(RPM_VERSION)-*.rpm
