# Signed apt and dnf repositories of the packages built here, which nodes install from by
# name (docs/install.md), made by packaging/repo/publish with one key:
#   apt: reprepro (Debian's) keeps it, one distribution per Debian release, the native
#        package in bookworm and trixie, the self-contained one in bullseye; InRelease and
#        Release.gpg signed.
#   dnf: rpm/el9, EL9's build of token-resource (EPEL 9 has its libraries) and the
#        self-contained token-resource-bundled; packages and repomd.xml signed.
# Included from the Makefile.
#
#   make repo                  -> dist/repo/: dists/, pool/, rpm/el9/ and token-resource.gpg,
#                                 the public key nodes check them with (token-resource.asc,
#                                 armored); put it on any web server as it is. reprepro's own
#                                 files stay in build/repo/state.
#   make repo REPO_GNUPGHOME=DIR REPO_KEY=FINGERPRINT
#                              -> signed with a key you keep (a passphrase is asked by
#                                 gpg-agent)
#   make repo REPO_NATIVE_DEBS=... REPO_BUNDLED_DEBS=... REPO_EL9_RPMS=...
#                              -> other builds: a newer version replaces the one published
#
# Without REPO_KEY, the first secret key of REPO_GNUPGHOME signs; where there is none, one is
# made there (RSA 3072, no passphrase, no expiry): for a test or a lab. A fleet's key is kept
# offline or in a gpg-agent and given here, the same key for every release, or the nodes must
# be given the new public key first.

REPO_DIR ?= dist/repo
REPO_STATE ?= build/repo/state
REPO_GNUPGHOME ?= build/repo/gnupg
REPO_KEY ?=
REPO_NATIVE_SUITES := bookworm,trixie
REPO_BUNDLED_SUITES := bullseye
REPO_NATIVE_DEBS ?= $(DEB_FILE)
REPO_BUNDLED_DEBS ?= $(BUNDLED_DEB_FILE)
REPO_EL9_DIST := dist/el9
# rpm.mk (RPM_VERSION) is read after this file: expanded when used.
REPO_EL9_RPM = $(REPO_EL9_DIST)/token-resource-$(RPM_VERSION)-$(or $(RPM_RELEASE),1).noarch.rpm
REPO_EL9_RPMS ?= $(REPO_EL9_RPM) $(BUNDLED_RPM_FILE)

.PHONY: repo repo-packages
# The packages to publish, built unless given.
repo-packages:
	$(if $(filter $(DEB_FILE),$(REPO_NATIVE_DEBS)),$(MAKE) --no-print-directory -f packaging/deb.mk deb)
	$(if $(filter $(BUNDLED_DEB_FILE),$(REPO_BUNDLED_DEBS)),$(MAKE) --no-print-directory -f packaging/bundled.mk bundled-deb)
	$(if $(filter $(REPO_EL9_RPM),$(REPO_EL9_RPMS)),$(MAKE) --no-print-directory -f packaging/rpm.mk rpm RPM_TARGET=el9 RPM_DIST=$(REPO_EL9_DIST))
	$(if $(filter $(BUNDLED_RPM_FILE),$(REPO_EL9_RPMS)),$(MAKE) --no-print-directory -f packaging/bundled.mk bundled-rpm)

repo: repo-packages
	@for tool in reprepro:reprepro createrepo_c:createrepo-c rpmsign:rpm; do \
		command -v $${tool%%:*} >/dev/null || { echo "repo: $${tool%%:*} is needed (apt-get install $${tool#*:})" >&2; exit 1; }; done
	packaging/repo/publish $(REPO_DIR) $(REPO_STATE) $(abspath $(REPO_GNUPGHOME)) '$(REPO_KEY)' \
		$(addprefix $(REPO_NATIVE_SUITES):,$(REPO_NATIVE_DEBS)) \
		$(addprefix $(REPO_BUNDLED_SUITES):,$(REPO_BUNDLED_DEBS)) \
		$(addprefix el9:,$(REPO_EL9_RPMS))
