include(CMakePackageConfigHelpers)
install(DIRECTORY include/latte DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS latte EXPORT latteTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT latteTargets NAMESPACE latte:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/latte)
configure_package_config_file(cmake/latteConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/latteConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/latte)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/latteConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/latteConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/latteConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/latte)
install(DIRECTORY configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/latte)
