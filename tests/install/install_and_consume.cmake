# Installs the build tree into a fresh prefix, then configures, builds and runs the consumer
# project against it with find_package(latte). Run by CTest with:
#   -DBUILD_DIR=... -DWORK_DIR=... -DCONSUMER_DIR=... -DGENERATOR=... -DCXX=...
foreach(var BUILD_DIR WORK_DIR CONSUMER_DIR GENERATOR CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_and_consume.cmake needs -D${var}=...")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

run_step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/latte/latte.hpp include/latte/plugin.h)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the install tree lacks ${f}")
  endif()
endforeach()
file(GLOB_RECURSE config_files ${prefix}/*/latteConfig.cmake)
if(NOT config_files)
  message(FATAL_ERROR "the install tree has no latteConfig.cmake")
endif()
file(GLOB_RECURSE example_plugin ${prefix}/*/latte/plugins/liblatte_example.so)

run_step("configure the consumer" ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${consumer_build} -G ${GENERATOR}
         -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run_step("build the consumer" ${CMAKE_COMMAND} --build ${consumer_build})
run_step("run the consumer" ${consumer_build}/latte_consumer ${example_plugin})
message(STATUS "${step_output}")
if(NOT step_output MATCHES "consumer: ok")
  message(FATAL_ERROR "the consumer did not report success:\n${step_output}")
endif()
