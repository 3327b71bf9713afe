# k8sgpu.nvidia development commands. `make help` lists them.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# The venvs' Python: 3.12 or 3.13 (ansible-core 2.21, the development venv's, needs 3.12 or newer; Debian 12's python3
# is 3.11), found by lab/install-deps.sh --python (python3.12, python3.13 or python3 on PATH, pyenv's, /usr/local's);
# PYTHON=/path/to/python3.12 chooses one. Where none is found, the venv rules fail saying what to install.
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell lab/install-deps.sh --python 2>/dev/null)
endif
VENV ?= $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export K8SGPU_LAB_STATE ?= $(CURDIR)/.lab
export PYTHONDONTWRITEBYTECODE := 1
INVENTORY ?= inventories/lab
# First line of each step's recipe: when it started (make test's log is its timeline).
STAMP = @echo "[make $@ started $$(date +%H:%M:%S)]"

.PHONY: help deps venv importer-venv compat-venv release-check release porting-guide docs compat compat-lowest compat-newest requirements-install lab lab-images lab-down lab-status site test prebuild lint sanity unit cloud molecule integration lab-extended upgrade-test clean-cache

help:  ## show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# $(1): a venv made with $(2) (default $(PYTHON), checked by lab/install-deps.sh), from scratch when it holds another
# Python version (.venv was a venv of 3.11 before 2.0.0).
define make_venv
	@$(if $(2),command -v $(2) >/dev/null || { echo "$(2) not found (the Python of $(1))" >&2; exit 1; },PYTHON="$(PYTHON)" lab/install-deps.sh --python >/dev/null)
	@v() { "$$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }; \
	  if [ -x $(1)/bin/python ] && [ "$$(v $(1)/bin/python)" != "$$(v $(or $(2),$(PYTHON)))" ]; then \
	    echo "$(1) has Python $$(v $(1)/bin/python), not $$(v $(or $(2),$(PYTHON))): made again"; rm -rf $(1); fi
	$(or $(2),$(PYTHON)) -m venv $(1)
endef

$(VENV)/.installed: requirements-dev.txt
	$(call make_venv,$(VENV))
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements-dev.txt
	touch $@

# galaxy-importer in a venv of its own: it pins its own ansible-core and ansible-lint.
IMPORTER_VENV ?= $(CURDIR)/.venv-importer
$(IMPORTER_VENV)/.installed: requirements-importer.txt
	$(call make_venv,$(IMPORTER_VENV))
	$(IMPORTER_VENV)/bin/pip install -q --upgrade pip
	$(IMPORTER_VENV)/bin/pip install -q -r requirements-importer.txt
	touch $@

importer-venv: $(IMPORTER_VENV)/.installed

# The lower bound of requires_ansible (meta/runtime.yml): ansible-core 2.19 with what tests/unit needs (2.19 has the
# unit tests' ansible.module_utils.testing.patch_module_args), on the oldest Python 2.19 supports as a controller,
# 3.11 (Debian 12's python3). The dependency collections are not installed in it: make compat-lowest puts them on
# its sys.path.
COMPAT_VENV ?= $(CURDIR)/.venv-compat
COMPAT_PYTHON ?= python3.11
$(COMPAT_VENV)/.installed: requirements-compat.txt
	$(call make_venv,$(COMPAT_VENV),$(COMPAT_PYTHON))
	$(COMPAT_VENV)/bin/pip install -q --upgrade pip
	$(COMPAT_VENV)/bin/pip install -q -r requirements-compat.txt
	touch $@

compat-venv: $(COMPAT_VENV)/.installed

deps:  ## install the Debian packages the lab needs (as root) and check Go 1.26+
	lab/install-deps.sh

venv: $(VENV)/.installed  ## create .venv with the pinned development dependencies

lab: deps venv  ## bring the lab up (node containers, apt proxy, Kubernetes control plane)
	$(STAMP)
	lab/lab.sh up

lab-images: deps venv  ## only what molecule needs: the node images, the apt proxy and the toolkit repository
	$(STAMP)
	lab/lab.sh images
	lab/build-binaries.sh toolkit

lab-down:  ## remove the lab's containers, network and processes
	lab/lab.sh down

lab-status:  ## show the lab
	lab/lab.sh status

site: lab  ## on a fresh machine: install what is missing, bring the lab up, run site.yml against it
	$(STAMP)
	ansible-playbook site.yml -i $(INVENTORY)

# unit first (15 s; most failures show there). Then the lab, alone: when
# cold it waits for the Go builds of Kubernetes, kwok and etcd, which the lab
# tests wait for and which took 12 min instead of 5 beside lint, sanity and
# molecule's DKMS builds (2026-11-26, 2 vCPUs). Then the lab's
# integration tests (the longest step, 30-40 min, mostly waiting on the lab's
# controllers and Prometheus: 5-60 % of 2 cores, about 0.7 core on average)
# with, beside them, the steps named in INTEGRATION_BESIDE, one after the
# other (lint and sanity: about 2.5 min of one core, which no longer delays
# the lab tests; cloud: moto, 0.8 core; molecule: both cores only while DKMS
# builds; compat: the unit tests and syntax checks at both ends of the
# dependency ranges, one core; requirements-install: pip installs of the
# user's requirements files, mostly network; together they end 25-30 min
# before the lab tests do). They
# share no container, network, namespace or port: molecule's containers are its
# own, the lab tests use the lab's node containers and API server, cloud only
# loopback, lint and sanity only the checkout and temporary directories.
# lab-images (node images, apt proxy, toolkit repository: all that
# molecule needs, not the cluster) runs first, alone: lab.sh up holds lab.sh's
# lock while it waits for the Go builds (minutes when cold), and molecule must
# not wait behind it (MOLECULE_NEEDS=venv). The side steps' output is shown
# when they end (log: $(BESIDE_LOG)); make test fails if either side fails;
# an interrupt stops both (the side steps run in a process group of their own).
# INTEGRATION_BESIDE= runs every step one after the other (unit, lint, sanity,
# cloud, molecule, compat, requirements-install, lab, integration). The unit
# tests are a side step too (about 3 min of one core that no longer delay the
# lab tests' start).
INTEGRATION_BESIDE ?= unit lint sanity cloud molecule compat requirements-install
# The side steps yield the CPUs to the lab tests: nice 19 for their processes, CPU weight 2 (of 1024) for molecule's
# containers. The lab tests are the critical path: with the side steps at equal priority on 2 CPUs they ran 3-4x
# slower than alone while the side steps lasted (docs/development.md), and since 1.1.0 the side steps last longer
# (compat at both ends, the requirements installs).
BESIDE_NICE ?= 19
BESIDE_CPU_SHARES ?= 2
# make test leaves molecule's driver scenario out: its two DKMS builds (about 12 CPU-minutes each here) are the ones
# the lab's first site.yml makes on k8sgpu-lab-gpu-1 (Debian 12) and -gpu-2 (Debian 13, Tesla 535), with the same
# checks (tests/lab/test_site.py); `make molecule` runs it.
BESIDE_MOLECULE_SKIP ?= driver
BESIDE_LOG = $(K8SGPU_LAB_STATE)/beside-integration.log
test: deps prebuild  ## every test: unit, lint, sanity, cloud (moto), molecule, compat (both ends), requirements-install, lab integration
	$(STAMP)
	@if [ -z "$(strip $(INTEGRATION_BESIDE))" ]; then exec $(MAKE) --no-print-directory unit lint sanity cloud molecule compat requirements-install lab integration RELEASE_INSTALL_CHECK=0 MOLECULE_SKIP="$(BESIDE_MOLECULE_SKIP)"; fi; \
	$(MAKE) --no-print-directory lab-images; \
	rc=0; lab=0; $(MAKE) --no-print-directory lab || lab=1; \
	echo "[make $(strip $(INTEGRATION_BESIDE)) started $$(date +%H:%M:%S) beside make integration; log: $(BESIDE_LOG)]"; \
	setsid nice -n $(BESIDE_NICE) $(MAKE) --no-print-directory $(INTEGRATION_BESIDE) MOLECULE_NEEDS=venv RELEASE_INSTALL_CHECK=0 \
	  MOLECULE_CPU_SHARES=$(BESIDE_CPU_SHARES) MOLECULE_SKIP="$(BESIDE_MOLECULE_SKIP)" \
	  >$(BESIDE_LOG) 2>&1 </dev/null & beside=$$!; \
	trap 'kill -- -$$beside 2>/dev/null' INT TERM; \
	if [ $$lab -eq 0 ]; then $(MAKE) --no-print-directory integration || rc=1; else rc=1; fi; \
	r=0; wait $$beside || r=$$?; \
	echo "[make $(strip $(INTEGRATION_BESIDE)) ended $$(date +%H:%M:%S), rc $$r; its output:]"; cat $(BESIDE_LOG); \
	[ $$r -eq 0 ] || rc=1; \
	exit $$rc

# Started in the background first, while unit and lab-images run (and, when
# cold, while make lab waits for them beside lint and sanity): the Go builds the lab needs
# (lab/build-binaries.sh lab: the toolkit repository, kwok, etcd, Kubernetes)
# beside the node images (lab/lab.sh images: debootstrap, network-bound); then,
# at lower priority, what only tests use (lab/build-binaries.sh extras: CRI-O's
# config loader, Prometheus, prometheus-adapter, Karpenter) and the GPU-node
# bundle (lab/pack-k8s-node.sh; it takes the venv's wheels, so it waits for
# it). `make lab` waits only for the first part; the lab tests that use the rest
# run last and wait for their build (tests/lab/conftest.py, LATE_BUILDS). The
# scripts lock per target and cache by version; they report their own errors
# when `make lab` or a test runs them again.
PREBUILD_LOG = $(K8SGPU_LAB_STATE)/prebuild.log
prebuild:
	@mkdir -p $(K8SGPU_LAB_STATE)
	@if command -v go >/dev/null; then \
	  setsid bash -c 'stamp() { echo "[prebuild $$(date +%H:%M:%S)] $$*"; }; \
	    stamp lab; lab/build-binaries.sh lab; \
	    stamp extras; nice -n 10 lab/build-binaries.sh extras; \
	    for i in $$(seq 600); do [ -f $(VENV)/.installed ] && break; sleep 1; done; \
	    stamp pack-k8s-node; nice -n 10 lab/pack-k8s-node.sh all; stamp done' \
	    >$(PREBUILD_LOG) 2>&1 </dev/null & \
	  echo "lab builds started in the background (log: $(PREBUILD_LOG))"; fi
	@setsid lab/lab.sh images >$(K8SGPU_LAB_STATE)/prebuild-images.log 2>&1 </dev/null & \
	  echo "lab node images started in the background (log: $(K8SGPU_LAB_STATE)/prebuild-images.log)"

lint: venv importer-venv  ## ansible-lint, changelog lint, the release checks (tarball, galaxy-importer, ansible-builder)
	$(STAMP)
	ansible-lint --profile production
	antsibull-changelog lint
	$(MAKE) --no-print-directory release-check

# The built collection as Galaxy and a user get it (tests/release): its contents, every playbook by FQCN from the
# installed tarball, galaxy-importer with Galaxy's settings, and `ansible-builder create` of
# execution-environment.yml against that tarball (next to a copy of the file, so its src resolves there).
RELEASE_DIR ?= $(CURDIR)/.cache/release
# 0: only build the tarball and check its contents (make test sets it: make compat installs the tarball and checks
# every playbook, at both ends of the dependency ranges).
RELEASE_INSTALL_CHECK ?= 1
COLLECTION_TARBALL = $(RELEASE_DIR)/k8sgpu-nvidia-$(shell sed -n 's/^version: *//p' galaxy.yml).tar.gz
release-check: venv importer-venv  ## version_added and changelog against galaxy.yml's version; the built tarball: contents, playbooks by FQCN when installed, galaxy-importer, ansible-builder create
	$(STAMP)
	python tests/release/release_check.py
	rm -rf $(RELEASE_DIR); mkdir -p $(RELEASE_DIR)
	RELEASE_INSTALL_CHECK=$(RELEASE_INSTALL_CHECK) tests/release/test_release.sh $(RELEASE_DIR)
	tests/release/importer.sh $(COLLECTION_TARBALL)
	cp execution-environment.yml $(RELEASE_DIR)/
	ansible-builder create -f $(RELEASE_DIR)/execution-environment.yml -c $(RELEASE_DIR)/ee-context >$(RELEASE_DIR)/ansible-builder.log \
	  || { cat $(RELEASE_DIR)/ansible-builder.log; exit 1; }
	@t=$(notdir $(COLLECTION_TARBALL)); ctx=$(RELEASE_DIR)/ee-context/_build; \
	  if [ ! -f $$ctx/collections/$$t ] || ! grep -qx -- "- name: collections/$$t" $$ctx/requirements.yml; then \
	    echo "execution-environment.yml does not install $$t (galaxy.yml's version): update its src and name"; exit 1; fi; \
	  echo "ansible-builder create: the build context installs $$t ($(RELEASE_DIR)/ee-context)"
	@# What ansible-builder's introspection finds in the tarball (meta/execution-environment.yml ->
	@# requirements-ee.txt and its -r lines): every requirement of the user's four requirements files.
	: >$(RELEASE_DIR)/empty.cfg; ANSIBLE_CONFIG=$(RELEASE_DIR)/empty.cfg ANSIBLE_HOME=$(RELEASE_DIR)/home \
	  ansible-galaxy collection install --no-deps \
	  -p $(RELEASE_DIR)/introspect $(COLLECTION_TARBALL) >/dev/null 2>&1
	found=$$(ansible-builder introspect $(RELEASE_DIR)/introspect 2>/dev/null | sed -n "s/^- '\([^ ]*\) .*/\1/p"); \
	  missing=$$(grep -hvE '^[[:space:]]*(#|-r|$$)' requirements.txt requirements-gke.txt requirements-eks.txt \
	    requirements-cert.txt | grep -vxF -f <(echo "$$found") || true); \
	  if [ -n "$$missing" ]; then echo "ansible-builder introspect does not find: $$missing"; exit 1; fi; \
	  echo "ansible-builder introspect: the execution environment gets all $$(echo "$$found" | wc -l) requirements"

# The release of galaxy.yml's version (tests/release/release.sh): the changelog released from the fragments
# (changelogs/changelog.yaml, CHANGELOG.rst), the porting guide written again, `release_check.py --release`, one commit
# "Release <version>" of those files and an annotated tag <version>. RELEASE_ARGS: --date YYYY-MM-DD, --no-tag.
RELEASE_ARGS ?=
release: venv  ## release galaxy.yml's version: changelog, CHANGELOG.rst, porting guide, commit, annotated tag
	$(STAMP)
	tests/release/release.sh $(RELEASE_ARGS)

porting-guide:  ## write docs/porting_guide_2.rst from changelogs/ (make release does it too)
	python3 tests/release/porting_guide.py write

# The dependency collections at both ends of galaxy.yml's ranges, from PyPI's `ansible` wheels (pip download
# --no-deps; pip's cache keeps them; tests/release/compat_collections.py unpacks only kubernetes.core and amazon.aws
# into $(COMPAT_DEPS)/ansible-<version> and checks them against galaxy.yml: the lowest must be its lower bounds, the
# newest inside its ranges). Nothing from Galaxy. They go first on sys.path (PYTHONPATH, before site-packages and its
# own `ansible` package's copies: checked) for the unit tests, and are the only dependencies of the installed
# tarball for test_release.sh (DEPS_COLLECTIONS_PATH). About 8 s each when pip's cache is cold, 1 s warm.
COMPAT_DEPS ?= $(CURDIR)/.cache/compat
# kubernetes.core 5.0.0, amazon.aws 9.0.0: galaxy.yml's lower bounds, on ansible-core 2.19 ($(COMPAT_VENV); both
# collections declare requires_ansible >=2.15.0).
COMPAT_LOWEST_ANSIBLE ?= 11.0.0
# kubernetes.core 6.6.0, amazon.aws 11.4.0: the newest PyPI's `ansible` ships, on .venv's ansible-core (2.21.5, the
# one that `ansible` 14.5.0 installs).
COMPAT_NEWEST_ANSIBLE ?= 14.5.0
# compat-newest runs on .venv's ansible-core, as make unit does: the tests that exercise ansible-core alone (rendering
# every role template with hostile values, about 1.5 CPU-minutes) are not run again there.
COMPAT_NEWEST_SKIP ?= --ignore=tests/unit/test_role_templates_hostile.py
# Run the unit tests and test_release.sh on $(1)'s python with the dependency collections of $(2) (a directory).
define compat_run
	$(1)/python tests/release/compat_collections.py $(3) $(4) $(2)
	PATH=$(1):$$PATH; export PYTHONPATH=$(2); ansible --version | sed -n 1p; \
	  python -c 'import sys, ansible_collections.kubernetes.core as k, ansible_collections.amazon.aws as a; \
	    bad = [m.__name__ for m in (k, a) if not list(m.__path__)[0].startswith(sys.argv[1])]; \
	    sys.exit(f"{bad} not taken from {sys.argv[1]}" if bad else 0)' $(2); \
	  pytest -q -p no:cacheprovider tests/unit $(5); \
	  DEPS_COLLECTIONS_PATH=$(2) tests/release/test_release.sh
endef

compat: compat-lowest compat-newest  ## both ends: ansible-core 2.19 (Python 3.11) with the lowest dependency collections, 2.21 with the newest

compat-lowest: compat-venv  ## requires_ansible's and galaxy.yml's lower bounds: unit tests and installed playbooks' syntax check on ansible-core 2.19, kubernetes.core 5.0.0, amazon.aws 9.0.0
	$(STAMP)
	$(call compat_run,$(COMPAT_VENV)/bin,$(COMPAT_DEPS)/ansible-$(COMPAT_LOWEST_ANSIBLE),lowest,$(COMPAT_LOWEST_ANSIBLE))

compat-newest: venv  ## PyPI's ansible 14.5.0: ansible-core 2.21 (.venv) with its kubernetes.core and amazon.aws, unit tests and installed playbooks' syntax check
	$(STAMP)
	$(call compat_run,$(VENV)/bin,$(COMPAT_DEPS)/ansible-$(COMPAT_NEWEST_ANSIBLE),newest,$(COMPAT_NEWEST_ANSIBLE),$(COMPAT_NEWEST_SKIP))

# The README's `pip install -r` of each requirements file the tarball ships, in fresh venvs with pip 23.2.1 (what
# Python 3.11 and 3.12 bundle) and the newest pip; fails past 3 minutes per install (a backtracking resolver).
requirements-install:  ## each requirements file in a fresh venv, pip 23.2.1 and the newest pip, 3 min at most each
	$(STAMP)
	PYTHON=$(PYTHON) tests/release/requirements_install.sh

sanity: venv  ## ansible-test sanity (tests/sanity/run.sh)
	$(STAMP)
	tests/sanity/run.sh

docs: venv  ## regenerate the role READMEs' variables tables from meta/argument_specs.yml
	$(VENV)/bin/python tests/support/role_readmes.py

unit: venv  ## unit tests
	$(STAMP)
	pytest -q tests/unit

cloud: venv  ## cloud modules against a local moto server (tests/cloud; no AWS account, no network)
	$(STAMP)
	pytest -q tests/cloud

# Scenarios whose platforms have names of their own run beside the others (one
# at a time): driver's DKMS builds are the longest part of molecule and the
# others are mostly waiting on apt. Its output is shown when it ends. Set
# MOLECULE_BESIDE= to run every scenario one after the other.
MOLECULE_BESIDE ?= driver
# What molecule needs made first (make test, which has made lab-images, sets venv).
MOLECULE_NEEDS ?= lab-images
# The CPU weight of molecule's containers (docker update --cpu-shares, every 5 s while molecule runs; empty: docker's
# default, 1024). make test sets 2: the processes in molecule's containers (apt, DKMS builds) are children of
# containerd, not of make, so the nice level of make test's side steps does not reach them.
MOLECULE_CPU_SHARES ?=
# Extra arguments of `molecule test -s driver` (for example --platform-name molecule-driver-debian12).
MOLECULE_DRIVER_ARGS ?=
# Scenarios left out (make test sets BESIDE_MOLECULE_SKIP).
MOLECULE_SKIP ?=
molecule: $(MOLECULE_NEEDS)  ## molecule scenarios on the lab's Debian images
	$(STAMP)
	source $(K8SGPU_LAB_STATE)/env; rc=0; beside=(); \
	if [ -n "$(MOLECULE_CPU_SHARES)" ]; then \
	  ( while sleep 5; do docker ps -q --filter name=molecule- | xargs -r docker update --cpu-shares $(MOLECULE_CPU_SHARES) \
	      >/dev/null 2>&1 || true; done ) & shares=$$!; trap 'kill $$shares 2>/dev/null || true' EXIT; fi; \
	for s in $(filter-out $(MOLECULE_SKIP),$(MOLECULE_BESIDE)); do \
	  echo "[molecule $$s started $$(date +%H:%M:%S) beside the others; log: $(K8SGPU_LAB_STATE)/molecule-$$s.log]"; \
	  args=(); [ "$$s" != driver ] || args=($(MOLECULE_DRIVER_ARGS)); \
	  molecule test -s $$s $${args[@]+"$${args[@]}"} >$(K8SGPU_LAB_STATE)/molecule-$$s.log 2>&1 & beside+=("$$s:$$!"); done; \
	for s in molecule/*/molecule.yml; do s=$${s#molecule/}; s=$${s%/molecule.yml}; \
	  case " $(MOLECULE_BESIDE) $(MOLECULE_SKIP) " in *" $$s "*) continue ;; esac; \
	  args=(); [ "$$s" != driver ] || args=($(MOLECULE_DRIVER_ARGS)); \
	  echo "[molecule $$s started $$(date +%H:%M:%S)]"; molecule test -s $$s $${args[@]+"$${args[@]}"} || { rc=1; break; }; done; \
	for b in $${beside[@]+"$${beside[@]}"}; do s=$${b%%:*}; r=0; wait $${b#*:} || r=$$?; \
	  echo "[molecule $$s ended $$(date +%H:%M:%S), rc $$r; its output:]"; cat $(K8SGPU_LAB_STATE)/molecule-$$s.log; \
	  [ $$r -eq 0 ] || rc=1; done; \
	exit $$rc

# Lab test files that touch no Kubernetes object and no lab node: each works in node containers of its own
# (lab.sh node, docker run) or on local files. They run in a second pytest beside the others, which are mostly one
# ansible-playbook at a time on one CPU (docs/development.md); their output is shown when both end.
# LAB_BESIDE_FILES= runs every file in one pytest. test_faults_host.py (four host.yml runs with DKMS builds on a GPU
# host of its own and eight short ones, about 23 min here with other lab tests beside, 2026-12-07) goes last: by then the lab tests have started and the side steps, at nice 19,
# give it their CPU time rather than the lab tests theirs.
LAB_BESIDE_FILES ?= test_container_toolkit_site.py test_driver_flavour.py test_trust_proxy_keys.py \
  test_container_runtime_config.py test_faults_host.py test_driver_lifecycle.py \
  test_driver_source_nvidia.py
LAB_BESIDE_LOG = $(K8SGPU_LAB_STATE)/integration-beside.log
# Lab tests make test leaves out to end within CI's 90 minutes on 2 vCPUs (pytest node ids, relative to tests/lab;
# a file name stands for all its tests); `make lab-extended` runs them. What each proves and where else the same is
# checked: docs/development.md, "Lab tests outside make test". LAB_EXTENDED= runs every lab test in make integration.
LAB_EXTENDED ?= test_role_absent.py::test_dcgm_exporter_absent test_role_absent.py::test_gpu_metrics_adapter_absent \
  test_role_absent.py::test_gpu_dashboard_absent test_role_absent.py::test_karpenter_gpu_absent \
  test_k8s_node_rehearsal.py test_upgrade.py
LAB_DESELECT = $(foreach t,$(LAB_EXTENDED),--deselect tests/lab/$(t))
integration: lab  ## lab integration tests (tests/lab) against the running lab, less LAB_EXTENDED
	$(STAMP)
	@files=(); ignore=(); for f in $(LAB_BESIDE_FILES); do files+=(tests/lab/$$f); ignore+=(--ignore=tests/lab/$$f); done; \
	if [ $${#files[@]} -eq 0 ]; then exec pytest -q --durations=20 $(LAB_DESELECT) tests/lab; fi; \
	echo "[lab tests $(strip $(LAB_BESIDE_FILES)) started $$(date +%H:%M:%S) beside the others; log: $(LAB_BESIDE_LOG)]"; \
	pytest -q -p no:cacheprovider --durations=10 "$${files[@]}" >$(LAB_BESIDE_LOG) 2>&1 </dev/null & beside=$$!; \
	trap 'kill $$beside 2>/dev/null' INT TERM; \
	rc=0; pytest -q --durations=20 "$${ignore[@]}" $(LAB_DESELECT) tests/lab || rc=1; \
	r=0; wait $$beside || r=$$?; \
	echo "[lab tests $(strip $(LAB_BESIDE_FILES)) ended $$(date +%H:%M:%S), rc $$r; their output:]"; cat $(LAB_BESIDE_LOG); \
	[ $$r -eq 0 ] || rc=1; exit $$rc

lab-extended: lab  ## the lab tests make test leaves out (LAB_EXTENDED), against the running lab
	$(STAMP)
	@# Empty, pytest would run every test under the checkout: say so instead.
	@if [ -z "$(strip $(LAB_EXTENDED))" ]; then echo "LAB_EXTENDED is empty: make integration runs every lab test"; exit 0; fi; \
	pytest -q --durations=20 $(addprefix tests/lab/,$(LAB_EXTENDED))

upgrade-test: lab  ## rolling driver upgrade on real packages, 535.216.03 -> 535.261.03 with DKMS (slow; not in make test)
	lab/upgrade-nodes.sh image
	K8SGPU_UPGRADE_TEST=1 pytest -q -s tests/lab/test_upgrade_packages.py

clean-cache:  ## delete the cached binaries, images and packages (~/.cache/k8sgpu-lab)
	lab/lab.sh down
	rm -rf $${K8SGPU_CACHE:-$$HOME/.cache/k8sgpu-lab}
