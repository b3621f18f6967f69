# Convenience entry points; the real build is CMake (see README).
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DFP4LM_WERROR=ON

.PHONY: setup build demo test bench clean

setup:
	bash scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD)/fp4lm

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

bench: build
	$(BUILD)/fp4lm bench kernels

clean:
	rm -rf $(BUILD)
