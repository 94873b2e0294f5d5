# embed_text.cmake - turns a file into a C source that defines its bytes as a
# NUL-terminated array and their count, so that the binary carries the file
# (the registry's status page) and needs no path at run time. Bytes are
# written as numbers, so any content compiles and nothing needs escaping.
#
#   cmake -DIN=page.html -DOUT=page.c -DNAME=symbol -P embed_text.cmake
# defines  const unsigned char symbol[];  const unsigned long symbol_len;
if(NOT IN OR NOT OUT OR NOT NAME)
  message(FATAL_ERROR "embed_text.cmake: IN, OUT and NAME are required")
endif()
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n_hex)
math(EXPR n_bytes "${n_hex} / 2")
# "3c21..." -> "0x3c,0x21,...", sixteen to a line
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REPEAT "0x[0-9a-f][0-9a-f]," 16 row)
string(REGEX REPLACE "(${row})" "\\1\n    " bytes "${bytes}")
get_filename_component(src "${IN}" NAME)
file(WRITE "${OUT}"
     "/* ${NAME} - generated from ${src} by cmake/embed_text.cmake at build time; edit\n"
     " * ${src}, not this file. */\n"
     "const unsigned char ${NAME}[] = {\n    ${bytes}0x00};\n"
     "const unsigned long ${NAME}_len = ${n_bytes};\n")
