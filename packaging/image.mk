# Container image: `make image` -> dist/token-resource-<version>.oci.tar, an OCI image archive
# built here without pulling anything: mmdebstrap makes a Debian 12 root from Debian's packages
# with the project's .deb (and what it depends on, no recommends, no apt, no compiler, no apt
# lists, no docs), and packaging/image/oci.py turns it into an image whose ENTRYPOINT, CMD, ENV
# and LABELs come from packaging/image/Containerfile. Load it with `podman load -i FILE`,
# `skopeo copy oci-archive:FILE ...` or `ctr -n k8s.io images import FILE`, which names it
# $(IMAGE_NAME):<version> by itself. Needs root and mmdebstrap. Included from the top-level
# Makefile.

IMAGE_VERSION := $(PYPROJECT_VERSION)
# The name deploy/kubernetes/base runs; an overlay whose images: entry renames it (overlays/
# example: registry.example.com/token-resource) can have the archive carry its name instead.
IMAGE_NAME ?= localhost/token-resource
IMAGE_FILE := $(DEB_DIST)/token-resource-$(IMAGE_VERSION).oci.tar
IMAGE_BUILD_DIR := build/image
IMAGE_SUITE ?= bookworm
# The host's mirror, as the system tests use it (deb822 first, then sources.list).
IMAGE_MIRROR ?= $(shell sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
IMAGE_EXCLUDES := /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/locale/* \
	/usr/share/lintian/* /usr/share/bash-completion/*

.PHONY: image

image: deb
	rm -rf $(IMAGE_BUILD_DIR) && mkdir -p $(IMAGE_BUILD_DIR)
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) \
	$(DEB_ENV) mmdebstrap --quiet --mode=root --variant=essential \
		--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
		--hook-dir=/usr/share/mmdebstrap/hooks/file-mirror-automount \
		--aptopt='APT::Install-Recommends "false"' \
		$(foreach path,$(IMAGE_EXCLUDES),--dpkgopt='path-exclude=$(path)') \
		--include=$(abspath $(DEB_FILE)) --include=python3-prometheus-client \
		$(IMAGE_SUITE) $(IMAGE_BUILD_DIR)/rootfs.tar $(IMAGE_MIRROR)
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) \
	$(DEB_ENV) python3 packaging/image/oci.py $(IMAGE_BUILD_DIR)/rootfs.tar \
		packaging/image/Containerfile $(IMAGE_VERSION) $(IMAGE_FILE) $(IMAGE_NAME)
	@echo "built $(IMAGE_FILE): $$(du -m $(IMAGE_BUILD_DIR)/rootfs.tar | cut -f1) MB uncompressed, $$(du -m $(IMAGE_FILE) | cut -f1) MB archive"
