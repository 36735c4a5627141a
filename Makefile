# Entry points. `make run` and `make test` work on a fresh Debian 12 machine (they install what is
# missing first). BUILD_DIR / JOBS can be overridden.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)

.PHONY: deps build run test bench clean

deps:
	@scripts/setup.sh

build: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	@scripts/run_default.sh $(BUILD_DIR)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)
	@JOBS=$(JOBS) scripts/asan_fuzz.sh

bench: build
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target benchmarks

clean:
	rm -rf $(BUILD_DIR)
