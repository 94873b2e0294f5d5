# windows.cmake - the Windows build's own targets, included by CMakeLists.txt when it
# cross-builds with cmake/mingw-w64.cmake (./dev win, docs/windows.md): moontail.exe with the
# node-side commands, and the C tests that run under wine (CTest starts them through the
# toolchain file's CMAKE_CROSSCOMPILING_EMULATOR).
add_executable(moontail ${MT_CLI_SRC})
target_link_libraries(moontail PRIVATE mt_control mt_model mt_net)

enable_testing()
# The tests whose code is all node side and portable.
set(MT_WIN_TESTS test_compat test_sysinfo test_vecops test_quant)
foreach(name ${MT_WIN_TESTS})
  add_executable(${name} tests/${name}.c)
  target_link_libraries(${name} PRIVATE mt_control mt_model mt_net)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT
                       "MT_BIN=$<TARGET_FILE:moontail>;MT_SRC=${CMAKE_SOURCE_DIR}")
endforeach()
