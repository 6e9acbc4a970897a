/* kiln's C API: compile and run modules from any language with a C FFI.
 *
 * Functions that can fail return NULL or a non-zero status; kiln_last_error() then gives
 * the diagnostics (thread-local, valid until the next kiln call on that thread). Tensors
 * are dense, C order; outputs are allocated by kiln and released with kiln_tensors_free.
 *
 *   kiln_module* m = kiln_module_load("model.kmod");     // or a .kir, compiled in memory
 *   kiln_tensor in = {KILN_F32, 1, {4}, data, sizeof data};
 *   kiln_tensor* out; size_t n;
 *   if (kiln_module_run(m, "main", &in, 1, &out, &n) != 0) puts(kiln_last_error());
 */
#ifndef KILN_KILN_H
#define KILN_KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types, in the order of kiln's ElemType (part of the ABI). */
typedef enum kiln_dtype {
  KILN_F64 = 0,
  KILN_F32 = 1,
  KILN_F16 = 2,
  KILN_BF16 = 3,
  KILN_I1 = 4,
  KILN_I8 = 5,
  KILN_I16 = 6,
  KILN_I32 = 7,
  KILN_I64 = 8,
  KILN_U8 = 9,
  KILN_U16 = 10,
  KILN_U32 = 11,
  KILN_U64 = 12
} kiln_dtype;

#define KILN_MAX_RANK 8

typedef struct kiln_tensor {
  kiln_dtype dtype;
  int32_t rank;
  int64_t shape[KILN_MAX_RANK];
  void* data;        /* rank-product elements of dtype, C order */
  size_t size_bytes; /* must equal the element count times the element size */
} kiln_tensor;

typedef struct kiln_module kiln_module;

const char* kiln_last_error(void);

/* A .kmod file, or a .kir file compiled in memory for ref[0]. */
kiln_module* kiln_module_load(const char* path);
/* A .kmod file to run over the ranks of an MPI job, one group of the module's devices per
 * rank (docs/distributed.md, "Running under MPI"). `comm` points to the MPI_Comm to run on
 * (MPI_Init was called by the embedder; kiln works on a duplicate), or is NULL for
 * MPI_COMM_WORLD (kiln initialises MPI if nobody has, and then finalises it at exit).
 * Every rank loads the same module and makes the same kiln_module_run calls: rank 0's inputs
 * are used, and only rank 0 gets outputs (*num_outputs is 0 on the others). NULL with an
 * error ("this kiln was built without MPI") in a kiln built without MPI. */
kiln_module* kiln_module_load_mpi(const char* path, const void* comm);
/* This process's rank in the module's job (0 for a module not loaded for MPI). */
int kiln_module_rank(const kiln_module* module);
/* For a rank whose call failed (the others would wait for it until they time out): prints
 * kiln_last_error() and ends every rank of the job with exit status 1. Returns only for a
 * module not loaded for MPI. */
void kiln_module_abort(const kiln_module* module);
/* .kmod bytes (copied). */
kiln_module* kiln_module_load_memory(const void* data, size_t size);
/* Compiles a .kir file to a .kmod file; 0 on success. */
int kiln_compile_file(const char* input_path, const char* output_path);
void kiln_module_free(kiln_module* module);

size_t kiln_module_num_functions(const kiln_module* module);
/* NULL when index is out of range; owned by the module. */
const char* kiln_module_function_name(const kiln_module* module, size_t index);

/* Runs `function`; on success *outputs holds *num_outputs tensors. 0 on success.
 * Inputs are read where they lie. An input the module donates to a result (`donate` in its
 * IR, kiln compile --donate) is updated in place: after the call its data holds that result
 * (which is also returned, as a copy, in *outputs). */
int kiln_module_run(kiln_module* module, const char* function, const kiln_tensor* inputs,
                    size_t num_inputs, kiln_tensor** outputs, size_t* num_outputs);
void kiln_tensors_free(kiln_tensor* tensors, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KILN_H */
