# Hypernetwork files (models/hypernetwork.c) against the float64 reference of
# tools/hypernetwork_fixtures.py (committed: tests/fixtures/hypernetwork, hypernetwork_fixture.h).
latentd_add_test(test_models_hypernetwork SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_models_hypernetwork.c
                 LIBS latentd_models ARGS ${PROJECT_SOURCE_DIR}/tests/fixtures/hypernetwork
                 LABELS unit TIMEOUT 60)
