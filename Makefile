# ferry: the two commands a new user types are `make run` and `make test` (see README.md).
BUILD ?= build
JOBS ?= $(shell nproc)
PROMPT ?= Write a haiku about boats crossing a river.
CMAKE_FLAGS ?=

.PHONY: run test deps model configure build asan-test fuzz clean

run: deps model configure
	cmake --build $(BUILD) -j $(JOBS) --target ferry
	./$(BUILD)/ferry run --chat -p "$(PROMPT)" -n 128 --temp 0.7 --seed 1

test: deps model build
	@scripts/install_test_deps.sh $(BUILD)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(MAKE) asan-test

deps:
	@scripts/install_deps.sh

model:
	@scripts/fetch_model.sh models

configure: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The test suite once more under AddressSanitizer + UndefinedBehaviorSanitizer (without the slowest
# end-to-end model checks, which the release run covers).
asan-test: deps model
	cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE=ON -DFERRY_CUDA=OFF
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS) -LE slow

# libFuzzer builds of the parsers (clang); run one with e.g. build-fuzz/tests/fuzz/fuzz_gguf -max_total_time=60
fuzz:
	cmake -S . -B $(BUILD)-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DFERRY_FUZZ=ON -DFERRY_TESTS=OFF
	cmake --build $(BUILD)-fuzz -j $(JOBS)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz
