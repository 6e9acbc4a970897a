/* Embedding kiln from C (kiln/kiln.h): compile a model to a .kmod file, load it, run it,
 * read the outputs, free everything. Exits 1 with kiln's diagnostics on any failure.
 *
 *   kiln-embed-c-example MODEL.kir OUT.kmod
 */
#include <stdio.h>

#include "kiln/kiln.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: kiln-embed-c-example MODEL.kir OUT.kmod\n");
    return 1;
  }
  if (kiln_compile_file(argv[1], argv[2]) != 0) {
    fputs(kiln_last_error(), stderr);
    return 1;
  }
  kiln_module* m = kiln_module_load(argv[2]);
  if (!m) {
    fputs(kiln_last_error(), stderr);
    return 1;
  }
  float data[3] = {1.0f, -5.0f, 0.5f};
  kiln_tensor in = {KILN_F32, 1, {3}, data, sizeof data};
  kiln_tensor* out = NULL;
  size_t n = 0;
  int status = kiln_module_run(m, kiln_module_function_name(m, 0), &in, 1, &out, &n);
  if (status != 0) {
    fputs(kiln_last_error(), stderr);
    kiln_module_free(m);
    return 1;
  }
  float sum = *(const float*)out[1].data;
  printf("%zu outputs, y[0] = %g, sum = %g\n", n, ((const float*)out[0].data)[0], sum);
  kiln_tensors_free(out, n);
  /* Wrong inputs are reported, not fatal. */
  if (kiln_module_run(m, "main", &in, 0, &out, &n) == 0) return 1;
  printf("wrong input count refused: %s", kiln_last_error());
  kiln_module_free(m);
  return sum == 5.0f ? 0 : 1; /* relu(3) + relu(-9) + relu(2) */
}
