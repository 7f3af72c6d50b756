# Debian packages made by this build: `cpack -G DEB` in the build directory (or the `package`
# target) writes rgpu-server_<version>_<arch>.deb and rgpu-client_<version>_<arch>.deb.
#   rgpu-server: /usr/sbin/gpu-server, its systemd unit, /etc/rgpu/server.conf (a conffile with
#                module_cache set to the unit's cache), the user rgpu (maintainer scripts)
#   rgpu-client: libcuda.so.1, libnvidia-ml.so.1 (and libnccl.so.2 when built) in /usr/lib/rgpu,
#                a private directory never on the loader's default path, so they cannot shadow
#                a real driver; /usr/bin/rgpu (finds /usr/lib/rgpu); /etc/rgpu/client.conf.
#                RUNPATHs name /usr/lib/rgpu/deps relative to $ORIGIN (below).
# Dependencies come from dpkg-shlibdeps; rdma-core's libraries are Recommends since they are
# dlopened. tools/pkg_test.sh builds, lints, installs, runs and purges them.
include(GNUInstallDirs)

set(RGPU_DEB_DIR ${CMAKE_SOURCE_DIR}/deploy/debian)
set(RGPU_PKG_GEN ${CMAKE_BINARY_DIR}/packaging)
set(CMAKE_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

# Files made for the packages: the server config with the packaged cache directory, and the
# man pages and changelog compressed the way Debian wants (gzip -9n: no name, no time stamp).
file(READ ${CMAKE_SOURCE_DIR}/deploy/server.conf RGPU_SERVER_CONF)
string(REPLACE "# module_cache = /var/cache/rgpu/modules" "module_cache = /var/cache/rgpu/modules"
       RGPU_SERVER_CONF "${RGPU_SERVER_CONF}")
file(WRITE ${RGPU_PKG_GEN}/server.conf "${RGPU_SERVER_CONF}")
set(RGPU_PKG_GZ "")
foreach(src man/gpu-server.8 man/rgpu.1 debian/changelog)
  get_filename_component(name ${src} NAME)
  if(name STREQUAL "changelog")
    set(name changelog.Debian)
  endif()
  add_custom_command(OUTPUT ${RGPU_PKG_GEN}/${name}.gz
                     COMMAND gzip -9nc ${CMAKE_SOURCE_DIR}/deploy/${src} > ${RGPU_PKG_GEN}/${name}.gz
                     DEPENDS ${CMAKE_SOURCE_DIR}/deploy/${src} VERBATIM)
  list(APPEND RGPU_PKG_GZ ${RGPU_PKG_GEN}/${name}.gz)
endforeach()
add_custom_target(rgpu_package_files ALL DEPENDS ${RGPU_PKG_GZ})
# deploy/docker/Dockerfile.client builds with the build directory as its context: the script
# that lays the client out as a layer goes there beside the packages.
configure_file(${CMAKE_SOURCE_DIR}/deploy/docker/client-layer.sh ${CMAKE_BINARY_DIR}/client-layer.sh
               COPYONLY)

# What the packages ship is linked with full RELRO (read-only relocations, bound at load).
set(RGPU_SHIPPED gpu-server rgpu rgpu_client rgpu_nvml)
if(TARGET rgpu_nccl)
  list(APPEND RGPU_SHIPPED rgpu_nccl)
endif()
set_property(TARGET ${RGPU_SHIPPED} APPEND PROPERTY LINK_OPTIONS -Wl,-z,relro -Wl,-z,now)

# The client finds its own libraries wherever its tree is put (/usr, a container layer, a
# Kubernetes volume at /opt/rgpu): RUNPATH $ORIGIN-relative, to the deps/ subdirectory of
# /usr/lib/rgpu. The package ships no deps/ (Debian's libprotobuf-c1 and libssl3 are its
# dependencies, found on the system path after the missing deps/); a container layer on a base
# without them puts its copies there (deploy/docker/client-layer.sh). Only RUNPATH sees deps/:
# `rgpu run` puts /usr/lib/rgpu on LD_LIBRARY_PATH, which holds the driver-shaped libraries
# alone, so an application keeps its own libcrypto. RUNPATH (not RPATH): LD_LIBRARY_PATH still
# wins for those who set it.
set_property(TARGET rgpu APPEND PROPERTY LINK_OPTIONS -Wl,--enable-new-dtags)
set_target_properties(rgpu PROPERTIES INSTALL_RPATH "$ORIGIN/../lib/rgpu/deps")
foreach(lib rgpu_client rgpu_nvml rgpu_nccl)
  if(TARGET ${lib})
    set_property(TARGET ${lib} APPEND PROPERTY LINK_OPTIONS -Wl,--enable-new-dtags)
    set_target_properties(${lib} PROPERTIES INSTALL_RPATH "$ORIGIN/deps")
  endif()
endforeach()

# rgpu-server
install(TARGETS gpu-server RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR} COMPONENT server)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/systemd/gpu-server.service
        DESTINATION /lib/systemd/system COMPONENT server)
install(FILES ${RGPU_PKG_GEN}/server.conf DESTINATION /etc/rgpu
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT server)
install(FILES ${RGPU_PKG_GEN}/gpu-server.8.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man8
        COMPONENT server)
foreach(comp server client)
  install(FILES ${RGPU_DEB_DIR}/copyright ${RGPU_PKG_GEN}/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/rgpu-${comp} COMPONENT ${comp})
endforeach()
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/rgpu-server
        COMPONENT server)

# rgpu-client. The shims are dlopened or found through LD_LIBRARY_PATH (rgpu run): no
# development symlinks (NAMELINK_SKIP).
set(RGPU_CLIENT_LIBS rgpu_client rgpu_nvml)
if(TARGET rgpu_nccl)
  list(APPEND RGPU_CLIENT_LIBS rgpu_nccl)
endif()
install(TARGETS ${RGPU_CLIENT_LIBS} LIBRARY DESTINATION /usr/lib/rgpu NAMELINK_SKIP
        COMPONENT client)
install(TARGETS rgpu RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT client)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/client.conf DESTINATION /etc/rgpu
        PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ COMPONENT client)
install(FILES ${RGPU_PKG_GEN}/rgpu.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
        COMPONENT client)

# Control files: conffiles per package, the server's maintainer scripts.
file(WRITE ${RGPU_PKG_GEN}/server/conffiles "/etc/rgpu/server.conf\n")
file(WRITE ${RGPU_PKG_GEN}/client/conffiles "/etc/rgpu/client.conf\n")
foreach(script server.postinst server.prerm server.postrm client.postinst client.postrm)
  string(REPLACE "." ";" parts ${script})
  list(GET parts 0 comp)
  list(GET parts 1 name)
  configure_file(${RGPU_DEB_DIR}/rgpu-${script} ${RGPU_PKG_GEN}/${comp}/${name} COPYONLY)
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rgpu)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "rgpu developers <rgpu-dev@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "remote GPUs for unmodified CUDA programs")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL server client)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.org/rgpu")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libibverbs1, librdmacm1")

set(CPACK_DEBIAN_SERVER_PACKAGE_NAME rgpu-server)
set(CPACK_DEBIAN_SERVER_PACKAGE_SECTION net)
set(CPACK_DEBIAN_SERVER_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_SERVER_DESCRIPTION "remote GPUs for unmodified CUDA programs - server
gpu-server serves this host's GPUs to rgpu clients over TCP or RDMA: one worker
process and CUDA context per client session, tenants with tokens, memory quotas
and compute shares, Prometheus metrics. It runs as the system user rgpu under
the systemd unit gpu-server.service, which is installed but not started: set
up tenants in /etc/rgpu/server.conf first. The NVIDIA driver (libcuda.so.1) is
needed at run time.")
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_EXTRA
    ${RGPU_PKG_GEN}/server/conffiles ${RGPU_PKG_GEN}/server/postinst
    ${RGPU_PKG_GEN}/server/prerm ${RGPU_PKG_GEN}/server/postrm)
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_CLIENT_PACKAGE_NAME rgpu-client)
set(CPACK_DEBIAN_CLIENT_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_CLIENT_DESCRIPTION "remote GPUs for unmodified CUDA programs - client
A drop-in CUDA driver library (libcuda.so.1), with NVML and NCCL shims, that
sends every CUDA driver call to a gpu-server on a GPU host, so CUDA programs,
cuBLAS and PyTorch run on a host without a GPU. The libraries live in the
private directory /usr/lib/rgpu, never on the default library path: run a
program with 'rgpu run -- PROGRAM' (or LD_LIBRARY_PATH=/usr/lib/rgpu).")
set(CPACK_DEBIAN_CLIENT_PACKAGE_CONTROL_EXTRA ${RGPU_PKG_GEN}/client/conffiles
    ${RGPU_PKG_GEN}/client/postinst ${RGPU_PKG_GEN}/client/postrm)
set(CPACK_DEBIAN_CLIENT_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# ---- rgpu-slurm (slurm/, docs/slurm.md) -------------------------------------------------------
# The SPANK plugin in /usr/lib/rgpu/slurm, its plugstack.conf.d line (a conffile),
# job_submit.lua for the site to install beside slurm.conf, and rgpu-slurm-licenses. Built only
# where Slurm's headers are (libslurm-dev); a SPANK plugin loads only into the Slurm major.minor
# it was built against, hence the version range.
if(TARGET spank_rgpu)
  install(TARGETS spank_rgpu LIBRARY DESTINATION /usr/lib/rgpu/slurm COMPONENT slurm)
  install(TARGETS rgpu-slurm-licenses RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT slurm)
  install(FILES ${CMAKE_SOURCE_DIR}/slurm/job_submit.lua
          DESTINATION ${CMAKE_INSTALL_DATADIR}/rgpu-slurm COMPONENT slurm)
  install(FILES ${CMAKE_SOURCE_DIR}/slurm/plugstack.conf DESTINATION /etc/slurm/plugstack.conf.d
          RENAME rgpu.conf PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
          COMPONENT slurm)
  install(FILES ${RGPU_DEB_DIR}/copyright ${RGPU_PKG_GEN}/changelog.Debian.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/rgpu-slurm COMPONENT slurm)
  add_custom_command(OUTPUT ${RGPU_PKG_GEN}/rgpu-slurm-licenses.1.gz
                     COMMAND gzip -9nc ${CMAKE_SOURCE_DIR}/slurm/rgpu-slurm-licenses.1 >
                             ${RGPU_PKG_GEN}/rgpu-slurm-licenses.1.gz
                     DEPENDS ${CMAKE_SOURCE_DIR}/slurm/rgpu-slurm-licenses.1 VERBATIM)
  add_custom_target(rgpu_slurm_package_files ALL DEPENDS ${RGPU_PKG_GEN}/rgpu-slurm-licenses.1.gz)
  install(FILES ${RGPU_PKG_GEN}/rgpu-slurm-licenses.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
          COMPONENT slurm)
  set_property(TARGET spank_rgpu rgpu-slurm-licenses APPEND PROPERTY LINK_OPTIONS
               -Wl,-z,relro -Wl,-z,now)
  file(WRITE ${RGPU_PKG_GEN}/slurm/conffiles "/etc/slurm/plugstack.conf.d/rgpu.conf\n")
  list(APPEND CPACK_COMPONENTS_ALL slurm)
  math(EXPR RGPU_SLURM_NEXT "${RGPU_SLURM_MINOR} + 1")
  foreach(v RGPU_SLURM_MINOR RGPU_SLURM_NEXT) # 22.05, as Slurm numbers its releases
    if(${v} LESS 10)
      set(${v} 0${${v}})
    endif()
  endforeach()
  set(CPACK_DEBIAN_SLURM_PACKAGE_NAME rgpu-slurm)
  set(CPACK_DEBIAN_SLURM_PACKAGE_SECTION admin)
  set(CPACK_DEBIAN_SLURM_PACKAGE_DEPENDS
      "rgpu-client (= ${PROJECT_VERSION}-1), slurm-client (>= ${RGPU_SLURM_MAJOR}.${RGPU_SLURM_MINOR}), slurm-client (<< ${RGPU_SLURM_MAJOR}.${RGPU_SLURM_NEXT})")
  set(CPACK_DEBIAN_SLURM_DESCRIPTION "remote GPUs for unmodified CUDA programs - Slurm plugin
A SPANK plugin that gives srun, sbatch and salloc the options --rgpu=N,
--rgpu-mem=SIZE and --rgpu-share=P. slurmctld counts the request as the
cluster license rgpu (job_submit.lua, sized from the pool by
rgpu-slurm-licenses), so jobs beyond the pool's capacity wait in Slurm's
queue. At each step's start the plugin places the job on the pool's
gpu-servers and gives its tasks the servers, memory and tenant, as
'rgpu run' would. See /usr/share/rgpu-slurm.")
  set(CPACK_DEBIAN_SLURM_PACKAGE_CONTROL_EXTRA ${RGPU_PKG_GEN}/slurm/conffiles)
  set(CPACK_DEBIAN_SLURM_PACKAGE_CONTROL_STRICT_PERMISSION ON)
endif()

include(CPack)
