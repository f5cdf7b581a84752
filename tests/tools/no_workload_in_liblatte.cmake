# cmake -DNM=<nm> -DLIBRARY=<liblatte.so> -P no_workload_in_liblatte.cmake
# Fails when liblatte exports a symbol of the DSA-step workload (tools/workload), which belongs
# to the tools that link it, not to the library.
execute_process(COMMAND ${NM} -D --defined-only -C ${LIBRARY}
                OUTPUT_VARIABLE symbols ERROR_VARIABLE errors RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only -C ${LIBRARY} failed (${rc}): ${errors}")
endif()
# A symbol every liblatte exports, so that an empty or unreadable table cannot pass.
if(NOT symbols MATCHES "latte::Context::select\\(")
  message(FATAL_ERROR "${LIBRARY}: latte::Context::select is not among its dynamic symbols; "
                      "is this liblatte? nm printed:\n${symbols}")
endif()
string(REGEX MATCHALL "[^\n]*([Ww]orkload|DsaStep|dsa_step|StageRunner|StageTimer|WorkBuffer|MemoryTally)[^\n]*"
       found "${symbols}")
if(found)
  list(JOIN found "\n" found)
  message(FATAL_ERROR "${LIBRARY} exports symbols of the DSA-step workload, which lives in "
                      "tools/workload (the latte_workload library), not in liblatte:\n${found}")
endif()
