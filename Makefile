# Quick start: `make train` and `make test` install into .venv on first use.
# On a CUDA machine pick the wheel that matches your driver, e.g.
#   make train TORCH="torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
# Two stamps: `make train` needs only the core and the example project (a minute's install);
# tests, lint and the commands that use extras (sweeps, scaffold, ...) install `.[dev]`.
CORE := $(VENV)/.installed-core
STAMP := $(VENV)/.installed

$(CORE): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch is pinned in the same command so the resolver never pulls another build.
	$(BIN)/python -m pip install --quiet $(TORCH) -e .
	# The example project (src/litforge_examples) is not part of the litforge wheel: src/ goes
	# on the venv's path, for every process a run starts (DDP ranks, sweep workers).
	$(BIN)/python -c "import site, sys; open(site.getsitepackages()[0] + '/litforge-project.pth', 'w').write(sys.argv[1] + '\n')" "$(CURDIR)/src"
	touch $(CORE)

$(STAMP): $(CORE)
	$(BIN)/python -m pip install --quiet $(TORCH) -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

install-core: $(CORE)

train: $(CORE)
	$(BIN)/python train.py $(ARGS)

# Tests run in TEST_WORKERS processes (pytest-xdist): most of the suite's time is train.py
# processes starting (imports run on one core), so two workers keep both cores busy.
# TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

test: $(STAMP)
	$(PYTEST) $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PYTEST) -m slow $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PYTEST) -m "not gpu" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# A sweep's study in optuna-dashboard: make dashboard SWEEP=multirun/train/digits_optuna
# (a sweep directory, a journal file or a storage URL; PORT=8080 by default).
dashboard: $(STAMP)
	$(BIN)/python -m litforge.sweeps.dashboard $(SWEEP) --port $(or $(PORT),8080)

# CPU benchmark suite (< 10 min on 2 cores): benchmarks/results/latest.{json,md}.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

# Counted per-step cost (valgrind's instruction count, never in CI; ~15 min on 2 cores):
# litforge's callbacks and logger over Lightning's minimal Trainer, benchmarks/results/exact.json.
bench-exact: $(STAMP)
	$(BIN)/python -m benchmarks.exact $(BENCH_ARGS)

# The same run in float32 and each mixed precision this machine has (conf/experiment/
# precision_ab.yaml): multirun/train/precision_ab/precision_ab.{md,json,png}.
compare-precision: $(STAMP)
	$(BIN)/python train.py experiment=precision_ab $(ARGS)

# A project of your own: the example project renamed, litforge pinned (docs/new-project.md):
#   make new-project NAME=my_exp DEST=../my_exp [ARGS="--minimal --without wandb,s3"]
new-project: $(STAMP)
	$(BIN)/python -m litforge.scaffold new-project $(NAME) $(DEST) $(ARGS)

# conf/experiment/NAME.yaml (ARGS="--model --data": skeletons, their configs and a test).
new-experiment: $(STAMP)
	$(BIN)/python -m litforge.scaffold experiment $(NAME) $(ARGS)

clean:
	rm -rf outputs multirun .pytest_cache .ruff_cache
