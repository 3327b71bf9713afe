# k8sgpu.nvidia development commands. `make help` lists them.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export K8SGPU_LAB_STATE ?= $(CURDIR)/.lab
export PYTHONDONTWRITEBYTECODE := 1
INVENTORY ?= inventories/lab

.PHONY: help deps venv lab lab-down lab-status site test prebuild lint sanity unit cloud molecule integration upgrade-test clean-cache

help:  ## show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements-dev.txt
	touch $@

deps:  ## install the Debian packages the lab needs (as root) and check Go 1.26+
	lab/install-deps.sh

venv: $(VENV)/.installed  ## create .venv with the pinned development dependencies

lab: deps venv  ## bring the lab up (node containers, apt proxy, Kubernetes control plane)
	lab/lab.sh up

lab-down:  ## remove the lab's containers, network and processes
	lab/lab.sh down

lab-status:  ## show the lab
	lab/lab.sh status

site: lab  ## on a fresh machine: install what is missing, bring the lab up, run site.yml against it
	ansible-playbook site.yml -i $(INVENTORY)

test: prebuild lint sanity unit cloud lab molecule integration  ## every test: lint, sanity, unit, cloud (moto), molecule, lab integration

# The lab's Go builds and the GPU-node bundle the rehearsal test uses (cached
# by version; minutes when the cache is cold) start in the background while
# lint, sanity, unit and cloud run, which leave a core idle most of the time.
# `make lab` and the rehearsal wait for them (both scripts hold a lock) and
# report their errors. The bundle takes the venv's wheels: it waits for it.
prebuild:
	@mkdir -p $(K8SGPU_LAB_STATE)
	@if command -v go >/dev/null; then \
	  setsid bash -c 'lab/build-binaries.sh all && \
	    for i in $$(seq 600); do [ -f $(VENV)/.installed ] && break; sleep 1; done && lab/pack-k8s-node.sh all' \
	    >$(K8SGPU_LAB_STATE)/prebuild.log 2>&1 </dev/null & \
	  echo "lab builds started in the background (log: $(K8SGPU_LAB_STATE)/prebuild.log)"; fi

lint: venv  ## ansible-lint, production profile
	ansible-lint --profile production
	antsibull-changelog lint

sanity: venv  ## ansible-test sanity (tests/sanity/run.sh)
	tests/sanity/run.sh

unit: venv  ## unit tests
	pytest -q tests/unit

cloud: venv  ## cloud modules against a local moto server (tests/cloud; no AWS account, no network)
	pytest -q tests/cloud

molecule: lab  ## molecule scenarios on the lab's Debian images
	source $(K8SGPU_LAB_STATE)/env && for s in molecule/*/molecule.yml; do \
	  s=$${s#molecule/}; molecule test -s $${s%/molecule.yml}; done

integration: lab  ## lab integration tests (tests/lab) against the running lab
	pytest -q tests/lab

upgrade-test: lab  ## rolling driver upgrade on real packages, 535.216.03 -> 535.261.03 with DKMS (slow; not in make test)
	lab/upgrade-nodes.sh image
	K8SGPU_UPGRADE_TEST=1 pytest -q -s tests/lab/test_upgrade_packages.py

clean-cache:  ## delete the cached binaries, images and packages (~/.cache/k8sgpu-lab)
	lab/lab.sh down
	rm -rf $${K8SGPU_CACHE:-$$HOME/.cache/k8sgpu-lab}
