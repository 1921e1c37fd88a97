# Entry points. `make demo` is the main job, `make test` runs every test CI runs.
SHELL := /bin/bash
VENV := .venv/bin
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/build/collections
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: setup demo test lint unit api integration sanity bench clean-hosts molecule

setup:
	bash scripts/setup.sh

demo: setup
	$(VENV)/gpuaas demo

lint: setup
	$(VENV)/ruff check .
	$(VENV)/ansible-lint --profile production
	bash scripts/sanity.sh

sanity: setup
	bash scripts/sanity.sh

# Two xdist workers (tests/conftest.py schedules them); schemathesis's generated cases do not run under xdist
# workers, so that file runs alone afterwards, in one process.
test: setup lint
	$(VENV)/pytest -p no:cacheprovider -ra --durations=30 -n 2 --dist loadscope --ignore=tests/api/test_schemathesis.py tests
	$(VENV)/pytest -p no:cacheprovider -ra tests/api/test_schemathesis.py

unit: setup
	$(VENV)/pytest -p no:cacheprovider tests/unit

integration: setup
	$(VENV)/pytest -p no:cacheprovider -ra tests/integration

clean-hosts:
	$(VENV)/python scripts/testhosts.py down --all

# Role developers: `make molecule SCENARIO=cluster` builds what molecule needs and runs the scenario.
SCENARIO ?= cluster
molecule:
	bash scripts/molecule.sh $(SCENARIO)
