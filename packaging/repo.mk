# A signed apt repository of the packages built here, which nodes install from by name
# (docs/install.md): reprepro (Debian's) keeps it, one distribution per Debian release, the
# native package in bookworm and trixie, the self-contained one in bullseye, InRelease and
# Release.gpg signed (packaging/repo/apt-repo). Included from the Makefile.
#
#   make repo                  -> dist/repo/: dists/, pool/ and token-resource.gpg, the public
#                                 key nodes check it with (token-resource.asc, armored); put it
#                                 on any web server as it is. reprepro's own files stay in
#                                 build/repo/state.
#   make repo REPO_GNUPGHOME=DIR REPO_KEY=FINGERPRINT
#                              -> signed with a key you keep (a passphrase is asked by
#                                 gpg-agent)
#   make repo REPO_NATIVE_DEBS=... REPO_BUNDLED_DEBS=...
#                              -> other builds: a newer version replaces the one published
#
# Without REPO_KEY, the first secret key of REPO_GNUPGHOME signs; where there is none, one is
# made there (ed25519, no passphrase, no expiry): for a test or a lab. A fleet's key is kept
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

.PHONY: repo repo-packages
# The packages to publish, built unless given.
repo-packages:
	$(if $(filter $(DEB_FILE),$(REPO_NATIVE_DEBS)),$(MAKE) --no-print-directory -f packaging/deb.mk deb)
	$(if $(filter $(BUNDLED_DEB_FILE),$(REPO_BUNDLED_DEBS)),$(MAKE) --no-print-directory -f packaging/bundled.mk bundled-deb)

repo: repo-packages
	@command -v reprepro >/dev/null || { echo "repo: reprepro is needed (apt-get install reprepro)" >&2; exit 1; }
	packaging/repo/apt-repo $(REPO_DIR) $(REPO_STATE) $(abspath $(REPO_GNUPGHOME)) '$(REPO_KEY)' \
		$(addprefix $(REPO_NATIVE_SUITES):,$(REPO_NATIVE_DEBS)) \
		$(addprefix $(REPO_BUNDLED_SUITES):,$(REPO_BUNDLED_DEBS))
