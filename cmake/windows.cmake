# windows.cmake - the Windows build's own targets, included by CMakeLists.txt when it
# cross-builds with cmake/mingw-w64.cmake (./dev win, docs/windows.md): moontail.exe with the
# node-side commands, and the C tests that run under wine (CTest starts them through the
# toolchain file's CMAKE_CROSSCOMPILING_EMULATOR).
enable_language(RC)
# the application manifest: UTF-8 as the ANSI code page, so the C runtime takes UTF-8 paths
add_executable(moontail ${MT_CLI_SRC} packaging/windows/moontail.rc)
target_link_libraries(moontail PRIVATE mt_control mt_model mt_net)

enable_testing()
# The C tests whose code is all node side and portable (the rest use POSIX calls of their
# own, or llama.cpp's library as a reference).
set(MT_WIN_TESTS
    test_compat test_sysinfo test_vecops test_quant test_bg_thread test_mathf
    test_determinism test_model_load test_gguf test_kv_cache test_matmul test_sampler
    test_proto test_pace test_relay_hello test_quant_iq4t test_quant_kq test_quant_mix
    test_generate test_speculative test_tokenizer test_chat_kimi_k3 test_jinja
    test_gen_turns test_file_write test_distributed test_shard test_portable)
foreach(name ${MT_WIN_TESTS})
  add_executable(${name} tests/${name}.c)
  target_link_libraries(${name} PRIVATE mt_control mt_model mt_net)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT
                       "MT_BIN=$<TARGET_FILE:moontail>;MT_SRC=${CMAKE_SOURCE_DIR}")
endforeach()

# The installer an operator pushes to the cell's PCs (docs/windows.md): a zip of the stripped
# moontail.exe, the libmicrohttpd DLL from the prefix, install.cmd and README.txt.
find_file(MT_MHD_DLL libmicrohttpd-12.dll PATHS ${MT_WIN_PREFIX}/bin NO_DEFAULT_PATH
          NO_CMAKE_FIND_ROOT_PATH REQUIRED)
set(MT_ZIP_DIR ${CMAKE_BINARY_DIR}/moontail-node-win64)
add_custom_command(
  OUTPUT ${CMAKE_BINARY_DIR}/moontail-node-win64.zip
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${MT_ZIP_DIR}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${MT_ZIP_DIR}
  COMMAND ${CMAKE_STRIP} -o ${MT_ZIP_DIR}/moontail.exe $<TARGET_FILE:moontail>
  COMMAND ${CMAKE_COMMAND} -E copy ${MT_MHD_DLL} ${CMAKE_SOURCE_DIR}/packaging/windows/install.cmd
          ${CMAKE_SOURCE_DIR}/packaging/windows/README.txt ${MT_ZIP_DIR}
  COMMAND ${CMAKE_COMMAND} -E chdir ${CMAKE_BINARY_DIR} ${CMAKE_COMMAND} -E tar cf
          moontail-node-win64.zip --format=zip moontail-node-win64
  DEPENDS moontail ${CMAKE_SOURCE_DIR}/packaging/windows/install.cmd
          ${CMAKE_SOURCE_DIR}/packaging/windows/README.txt
  COMMENT "Packing moontail-node-win64.zip"
  VERBATIM)
add_custom_target(win_zip ALL DEPENDS ${CMAKE_BINARY_DIR}/moontail-node-win64.zip)

# A stand-in for a tunnel program that tests/win/cell.sh gives a Windows node's --tunnel.
add_executable(fake_tunnel tests/win/fake_tunnel.c)
target_link_libraries(fake_tunnel PRIVATE mt_core)
