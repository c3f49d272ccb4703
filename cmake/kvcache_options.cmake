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

# Test executables: our warnings, gtest main, discovered into ctest with a label. Each one
# applies KVCACHE_ISA as its ISA ceiling before its first test (tests/cpu/isa_ceiling_env.cpp).
function(kvcache_add_test name label)
  add_executable(${name} ${ARGN} ${PROJECT_SOURCE_DIR}/tests/cpu/isa_ceiling_env.cpp)
  kvcache_target_options(${name})
  target_link_libraries(${name} PRIVATE GTest::gtest GTest::gtest_main GTest::gmock kvcache_cpu)
  gtest_discover_tests(${name} PROPERTIES LABELS ${label} DISCOVERY_TIMEOUT 60)
endfunction()

# Compiles a target's sources eight at a time as one unit (CMake's unity build). For the CLI,
# the server and the JSON-reading layers most of a source's compile time goes to instantiating
# the same header-only libraries (CLI11, nlohmann/json) again; combined, the `kvcache` target
# builds in 0.59x the time. Names local to a source (anonymous namespaces) must therefore be
# unique within its target. KVCACHE_UNITY=OFF compiles every source alone.
function(kvcache_unity target)
  if(KVCACHE_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
endfunction()

# One layer of SPEC §1: a static library named kvcache_<layer> from this folder's sources.
# Its public/ folder is all other targets may include (public/<layer>/*.h); internal/ reaches
# the folder's own headers. DEPS are linked publicly (the layers below), PRIVATE_DEPS not.
# UNITY compiles its sources as a few combined units (kvcache_unity).
#   kvcache_layer(engine SOURCES a.cpp b.cpp DEPS kvcache_cpu PRIVATE_DEPS PkgConfig::X)
function(kvcache_layer layer)
  cmake_parse_arguments(PARSE_ARGV 1 arg "UNITY" "" "SOURCES;DEPS;PRIVATE_DEPS")
  set(target kvcache_${layer})
  add_library(${target} STATIC ${arg_SOURCES})
  target_include_directories(${target} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/public)
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/internal)
  target_link_libraries(${target} PUBLIC ${arg_DEPS} PRIVATE ${arg_PRIVATE_DEPS})
  kvcache_target_options(${target})
  if(arg_UNITY)
    kvcache_unity(${target})
  endif()
endfunction()
