include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# find_package(idem) gives the core, idem::idem; each component is one more export set
# (find_package(idem COMPONENTS http metrics reference devtools sinks console service)), so a user of the core
# needs none of the components' dependencies.
set(idem_components http metrics reference devtools sinks console service)
install(TARGETS idem EXPORT idemTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT idemTargets NAMESPACE idem:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/idem)
foreach(component IN LISTS idem_components)
  install(TARGETS idem_${component} EXPORT idem_${component}Targets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          FILE_SET HEADERS DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT idem_${component}Targets NAMESPACE idem::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/idem)
endforeach()
if(IDEM_BUILD_CLI)
  install(TARGETS idem-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
configure_package_config_file(cmake/idemConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/idemConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/idem)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/idemConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/idemConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/idemConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/idem)
