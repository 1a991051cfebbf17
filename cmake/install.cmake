include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS idem EXPORT idemTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(IDEM_BUILD_CLI)
  install(TARGETS idem-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT idemTargets NAMESPACE idem:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/idem)
configure_package_config_file(cmake/idemConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/idemConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/idem)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/idemConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/idemConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/idemConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/idem)
