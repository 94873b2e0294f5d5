# windows.cmake - the Windows build's own targets, included by CMakeLists.txt when it
# cross-builds with cmake/mingw-w64.cmake (./dev win, docs/windows.md): moontail.exe with the
# node-side commands, and the C tests that run under wine (CTest starts them through the
# toolchain file's CMAKE_CROSSCOMPILING_EMULATOR).
add_executable(moontail ${MT_CLI_SRC})
target_link_libraries(moontail PRIVATE mt_control mt_model mt_net)

enable_testing()
# The C tests whose code is all node side and portable (the rest use POSIX calls of their
# own, or llama.cpp's library as a reference).
set(MT_WIN_TESTS
    test_compat test_sysinfo test_vecops test_quant test_bg_thread test_mathf
    test_determinism test_model_load test_gguf test_kv_cache test_matmul test_sampler
    test_proto test_pace test_relay_hello test_quant_iq4t test_quant_kq test_quant_mix
    test_generate test_speculative test_tokenizer test_chat_kimi_k3 test_jinja
    test_gen_turns test_file_write test_distributed test_shard)
foreach(name ${MT_WIN_TESTS})
  add_executable(${name} tests/${name}.c)
  target_link_libraries(${name} PRIVATE mt_control mt_model mt_net)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT
                       "MT_BIN=$<TARGET_FILE:moontail>;MT_SRC=${CMAKE_SOURCE_DIR}")
endforeach()
