# Convenience entry points; the real build is CMake (see README).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DFP4LM_WERROR=ON

.PHONY: setup configure build demo test bench clean

setup:
	bash scripts/setup.sh

configure: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

# Everything: the library, the CLI, every test binary, the benchmarks.
build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Only what the demo runs: the fp4lm executable (no test binary, no benchmark).
demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target fp4lm_cli
	bash scripts/demo.sh $(BUILD)/fp4lm

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

bench: configure
	cmake --build $(BUILD) -j $(JOBS) --target fp4lm_cli
	$(BUILD)/fp4lm bench kernels

clean:
	rm -rf $(BUILD)
