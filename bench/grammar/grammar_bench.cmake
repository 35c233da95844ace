# bench/grammar: grammar_bench, the constrained-decoding mask time per token on real vocabularies.
add_executable(grammar_bench ${CMAKE_CURRENT_LIST_DIR}/grammar_bench.cpp)
target_link_libraries(grammar_bench PRIVATE ferry_grammar ferry_tokenizer CLI11::CLI11)
