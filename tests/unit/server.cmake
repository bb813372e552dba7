# server/ unit tests: path safety (pure), job store + queue (SQLite).
latentd_add_test(test_server_path
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_server_path.c ${PROJECT_SOURCE_DIR}/server/srv_path.c
  LIBS latentd_util LABELS unit TIMEOUT 60)
target_include_directories(test_server_path PRIVATE ${PROJECT_SOURCE_DIR}/server)
if(TARGET latentd_server)
  latentd_add_test(test_server_store
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_server_store.c
    LIBS latentd_server LABELS unit TIMEOUT 60)
endif()
if(TARGET latentd_server)
  latentd_add_test(test_server_ws
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_server_ws.c
    LIBS latentd_server LABELS unit TIMEOUT 60)
endif()
