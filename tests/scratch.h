/* scratch: the temporary folder a test writes its files into. The test fills tmpdir (mkdtemp) at start;
 * tmp_path(name) gives "<tmpdir>/<name>" in one of 8 rotating buffers (valid for the next 7 calls). */
#ifndef TEST_SCRATCH_H
#define TEST_SCRATCH_H

extern char tmpdir[256];
const char *tmp_path(const char *name);

#endif
