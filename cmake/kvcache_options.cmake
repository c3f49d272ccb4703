# Per-target compile options for the project's own targets; global flags are never edited.
function(kvcache_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
                         -Wno-sign-conversion)
  if(KVCACHE_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(KVCACHE_SANITIZE)
    target_compile_options(${target} PUBLIC -fsanitize=address,undefined -fno-omit-frame-pointer
                           -fno-sanitize-recover=undefined)
    target_link_options(${target} PUBLIC -fsanitize=address,undefined)
  endif()
endfunction()

# Test executables: our warnings, gtest main, discovered into ctest with a label.
function(kvcache_add_test name label)
  add_executable(${name} ${ARGN})
  kvcache_target_options(${name})
  target_link_libraries(${name} PRIVATE GTest::gtest GTest::gtest_main GTest::gmock)
  gtest_discover_tests(${name} PROPERTIES LABELS ${label} DISCOVERY_TIMEOUT 60)
endfunction()
