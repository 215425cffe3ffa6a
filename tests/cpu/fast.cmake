# Fast CPU kernel tests (label cpu) and the CPU kernel benchmark (not a test).
flashback_add_test(test_fast_paged cpu test_fast_paged.cc)
flashback_add_test(test_fast_invariance cpu test_fast_invariance.cc)
