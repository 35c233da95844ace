# What each fuzz target links: only the library it exercises, so it builds whatever state the rest is in.
set(FERRY_FUZZ_LIBS_gguf ferry_formats)
set(FERRY_FUZZ_LIBS_safetensors ferry_formats)
set(FERRY_FUZZ_LIBS_tokenizer ferry_tokenizer)
set(FERRY_FUZZ_LIBS_chat_template ferry_tokenizer)
set(FERRY_FUZZ_LIBS_openai_request ferry_server)
set(FERRY_FUZZ_LIBS_http_request ferry_server)
set(FERRY_FUZZ_LIBS_grammar ferry_grammar)
set(FERRY_FUZZ_LIBS_chat_output ferry_server)
