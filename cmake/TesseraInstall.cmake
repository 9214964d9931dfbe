# TesseraInstall: what `cmake --install` puts where, so that programs outside this tree build
# against an installed Tessera — with CMake:
#
#   find_package(Tessera 0.1 REQUIRED)
#   target_link_libraries(my_program PRIVATE Tessera::tessera)
#
# or with pkg-config:
#
#   c++ -std=c++17 my_program.cc $(pkg-config --cflags --libs tessera) -o my_program
#
# Installed (paths under the prefix):
#   lib/libtessera_{core,http,schema,serving,actors,cluster,coordinator,workloads}.a
#   include/tessera/*.h, include/tessera/workloads/*.h — the public tree, and nothing else: it
#       names no CAF, Cap'n Proto or internal type (scripts/check_layering.sh follows its
#       includes), and programs include it as "tessera/training.h", as examples/ does, so that an
#       example copied out of the tree compiles unchanged.
#   lib/cmake/Tessera/ — TesseraConfig.cmake (finds the dependencies), TesseraConfigVersion.cmake,
#       TesseraTargets.cmake, FindCAF.cmake (CAF 0.17 ships no CMake package)
#   lib/pkgconfig/tessera.pc, tessera-workloads.pc
#   bin/tessera — the command-line tool
#
# Targets: Tessera::tessera is the library — training, serving, the clusters, the actors, the
# file formats and core, behind the public tree — with every dependency it links (CAF core, io and openssl, Cap'n Proto,
# OpenSSL, zlib, Abseil, Eigen, spdlog and fmt, nlohmann-json), so it is the only target a
# program names. Tessera::workloads adds the reference workloads (the examples' data and models).
# tests/install/ builds a program against a freshly installed tree both ways, in the test suite.
#
# Note [One Eigen alignment]
# Tessera's headers are compiled again inside every program that includes them, with that
# program's flags: perhaps -march=native against a portable Tessera, or none against a
# TESSERA_NATIVE one. Eigen sizes its heap alignment by the instruction set it is compiled for (16
# bytes for SSE2, 32 for AVX, 64 for AVX-512) and frees accordingly, so an Eigen matrix allocated
# on one side of the library boundary and freed on the other (a StepWorkspace's members, say)
# would be freed with the wrong offset. tessera_core therefore sets EIGEN_MAX_ALIGN_BYTES=64 as a
# public definition: every translation unit, Tessera's and its users', allocates Eigen's heap
# memory alike whatever it is compiled for. No public header holds a fixed-size Eigen type, the
# only other thing whose layout follows the instruction set. (Before the pin, a program compiled
# for the baseline that let a StepWorkspace go out of scope after the -march=native library's
# ForwardBackward had filled it aborted with "double free or corruption".)

include(CMakePackageConfigHelpers)

set(TESSERA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/Tessera")
set(TESSERA_INSTALLED_LIBRARIES
    tessera_core tessera_http tessera_schema tessera_serving tessera_actors tessera_cluster
    tessera_coordinator)

# The one target a program links: an interface library over the static libraries, exported as
# Tessera::tessera (`tessera` itself is the command-line tool's target). The same name works in
# this tree.
add_library(tessera_library INTERFACE)
target_link_libraries(tessera_library INTERFACE tessera_coordinator tessera_serving tessera_schema)
set_target_properties(tessera_library PROPERTIES EXPORT_NAME tessera)
add_library(Tessera::tessera ALIAS tessera_library)
add_library(Tessera::workloads ALIAS tessera_workloads)
foreach(library ${TESSERA_INSTALLED_LIBRARIES} tessera_workloads)
  string(REPLACE "tessera_" "" export_name "${library}")
  set_target_properties(${library} PROPERTIES EXPORT_NAME ${export_name})
endforeach()

install(TARGETS tessera_library ${TESSERA_INSTALLED_LIBRARIES} tessera_workloads
        EXPORT TesseraTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/tessera/"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/tessera"
        FILES_MATCHING PATTERN "*.h")
if(TARGET tessera)
  install(TARGETS tessera RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endif()

install(EXPORT TesseraTargets NAMESPACE Tessera:: DESTINATION "${TESSERA_INSTALL_CMAKEDIR}")
configure_package_config_file(cmake/TesseraConfig.cmake.in
  "${PROJECT_BINARY_DIR}/TesseraConfig.cmake"
  INSTALL_DESTINATION "${TESSERA_INSTALL_CMAKEDIR}")
# 0.x: a new minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/TesseraConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/TesseraConfig.cmake"
              "${PROJECT_BINARY_DIR}/TesseraConfigVersion.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake"
        DESTINATION "${TESSERA_INSTALL_CMAKEDIR}")

# pkg-config: relocatable (the prefix is found from the .pc file's own directory), so the tree
# can be installed with `cmake --install build --prefix DIR` anywhere. The libraries are static,
# so everything they link is in Requires and Libs, not in the .private fields.
file(RELATIVE_PATH TESSERA_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" TESSERA_PC_TO_PREFIX "${TESSERA_PC_TO_PREFIX}")
get_filename_component(TESSERA_CAF_LIBDIR "${CAF_CORE_LIBRARY}" DIRECTORY)
set(TESSERA_PC_CAF_LIBS "-lcaf_openssl -lcaf_io -lcaf_core")
if(NOT TESSERA_CAF_LIBDIR IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
  set(TESSERA_PC_CAF_LIBS "-L${TESSERA_CAF_LIBDIR} ${TESSERA_PC_CAF_LIBS}")
endif()
foreach(pc tessera tessera-workloads)
  configure_file("cmake/${pc}.pc.in" "${PROJECT_BINARY_DIR}/${pc}.pc" @ONLY)
  install(FILES "${PROJECT_BINARY_DIR}/${pc}.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endforeach()
