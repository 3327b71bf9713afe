/*
 * cuda-vector-add without the CUDA toolkit: the CUDA samples' vectorAdd test
 * (the output of NVIDIA's k8s cuda-sample:vectoradd image, ending in
 * "Test PASSED") through the CUDA driver API only. libcuda.so.1 is loaded at
 * run time (the NVIDIA container toolkit mounts the host driver's into the
 * container), and the kernel is the collection's own PTX
 * (plugins/module_utils/_cuda_driver.py, VECTOR_ADD_PTX, written to
 * vector_add_ptx.h by build.sh), compiled by the driver's JIT for whatever GPU
 * it finds. Every element is checked. Exit status 0 only on "Test PASSED".
 *
 * Build: tests/gpu/cuda-vector-add/build.sh OUTDIR (gcc, glibc; no CUDA).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vector_add_ptx.h" /* static const char VECTOR_ADD_PTX[] */

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef unsigned long long CUdeviceptr;

static struct {
    CUresult (*Init)(unsigned int);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetPCIBusId)(char *, int, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*ModuleLoadDataEx)(CUmodule *, const void *, unsigned int, int *, void **);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemsetD32)(CUdeviceptr, unsigned int, size_t);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*LaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, void *, void **, void **);
    CUresult (*GetErrorName)(CUresult, const char **);
} cu;

static void *library;

static void *symbol(const char *name)
{
    void *f = dlsym(library, name);
    if (f == NULL) {
        fprintf(stderr, "libcuda.so.1 has no %s: the NVIDIA driver is too old or this is not the driver's libcuda\n", name);
        exit(EXIT_FAILURE);
    }
    return f;
}

/* Failed driver call: the CUDA samples' wording, with the CUresult's name. */
static void check(CUresult result, const char *what)
{
    const char *name = NULL;
    if (result == 0)
        return;
    if (cu.GetErrorName == NULL || cu.GetErrorName(result, &name) != 0 || name == NULL)
        name = "unknown CUresult";
    fprintf(stderr, "Failed to %s (error code %s = %d)!\n", what, name, result);
    exit(EXIT_FAILURE);
}

static void load_driver(void)
{
    library = dlopen("libcuda.so.1", RTLD_NOW);
    if (library == NULL) {
        fprintf(stderr, "Failed to load libcuda.so.1 (%s): the container lacks the NVIDIA driver library or a library it "
                        "needs; run it with the nvidia runtime and a GPU allocated (resources: limits: nvidia.com/gpu: 1)\n", dlerror());
        exit(EXIT_FAILURE);
    }
    *(void **)&cu.GetErrorName = dlsym(library, "cuGetErrorName");
    *(void **)&cu.Init = symbol("cuInit");
    *(void **)&cu.DriverGetVersion = symbol("cuDriverGetVersion");
    *(void **)&cu.DeviceGet = symbol("cuDeviceGet");
    *(void **)&cu.DeviceGetName = symbol("cuDeviceGetName");
    *(void **)&cu.DeviceGetPCIBusId = symbol("cuDeviceGetPCIBusId");
    *(void **)&cu.DevicePrimaryCtxRetain = symbol("cuDevicePrimaryCtxRetain");
    *(void **)&cu.DevicePrimaryCtxRelease = symbol("cuDevicePrimaryCtxRelease_v2");
    *(void **)&cu.CtxSetCurrent = symbol("cuCtxSetCurrent");
    *(void **)&cu.CtxSynchronize = symbol("cuCtxSynchronize");
    *(void **)&cu.ModuleLoadDataEx = symbol("cuModuleLoadDataEx");
    *(void **)&cu.ModuleGetFunction = symbol("cuModuleGetFunction");
    *(void **)&cu.ModuleUnload = symbol("cuModuleUnload");
    *(void **)&cu.MemAlloc = symbol("cuMemAlloc_v2");
    *(void **)&cu.MemFree = symbol("cuMemFree_v2");
    *(void **)&cu.MemsetD32 = symbol("cuMemsetD32_v2");
    *(void **)&cu.MemcpyHtoD = symbol("cuMemcpyHtoD_v2");
    *(void **)&cu.MemcpyDtoH = symbol("cuMemcpyDtoH_v2");
    *(void **)&cu.LaunchKernel = symbol("cuLaunchKernel");
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 50000;
    size_t size = (size_t)n * sizeof(float);
    int threads = 256, blocks, version = 0;
    char name[256] = "";
    char bus_id[32] = "";
    CUdevice device;
    CUcontext context;
    CUmodule module;
    CUfunction kernel;
    CUdeviceptr d_a, d_b, d_c;
    float *a, *b, *c;

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    setvbuf(stdout, NULL, _IOLBF, 0); /* a pod log shows each line as it is printed */
    if (n <= 0) {
        fprintf(stderr, "usage: %s [ELEMENTS > 0]\n", argv[0]);
        return EXIT_FAILURE;
    }
    printf("[Vector addition of %d elements]\n", n);
    a = malloc(size);
    b = malloc(size);
    c = malloc(size);
    if (a == NULL || b == NULL || c == NULL) {
        fprintf(stderr, "Failed to allocate host vectors!\n");
        return EXIT_FAILURE;
    }
    for (int i = 0; i < n; ++i) {
        a[i] = rand() / (float)RAND_MAX;
        b[i] = rand() / (float)RAND_MAX;
    }

    load_driver();
    check(cu.Init(0), "initialise the CUDA driver (cuInit)");
    check(cu.DriverGetVersion(&version), "read the driver's CUDA version");
    check(cu.DeviceGet(&device, 0), "get device 0");
    check(cu.DeviceGetName(name, sizeof name, device), "read the device name");
    printf("GPU Device 0: \"%s\", CUDA driver %d.%d\n", name, version / 1000, version % 1000 / 10);
    /* Which of the node's GPUs the device plugin gave this pod (one GPU per pod on a multi-GPU node). */
    check(cu.DeviceGetPCIBusId(bus_id, sizeof bus_id, device), "read the device's PCI bus id");
    printf("GPU Device 0 PCI bus id %s (NVIDIA_VISIBLE_DEVICES=%s)\n", bus_id,
           getenv("NVIDIA_VISIBLE_DEVICES") ? getenv("NVIDIA_VISIBLE_DEVICES") : "unset");
    check(cu.DevicePrimaryCtxRetain(&context, device), "retain the primary context");
    check(cu.CtxSetCurrent(context), "make the context current");
    check(cu.ModuleLoadDataEx(&module, VECTOR_ADD_PTX, 0, NULL, NULL), "load the vectorAdd PTX (driver JIT)");
    check(cu.ModuleGetFunction(&kernel, module, "vectorAdd"), "find the vectorAdd kernel");

    check(cu.MemAlloc(&d_a, size), "allocate device vector A");
    check(cu.MemAlloc(&d_b, size), "allocate device vector B");
    check(cu.MemAlloc(&d_c, size), "allocate device vector C");
    /* C starts as NaN: an element the kernel never wrote fails the check. */
    check(cu.MemsetD32(d_c, 0x7FC00000u, (size_t)n), "fill device vector C");

    printf("Copy input data from the host memory to the CUDA device\n");
    check(cu.MemcpyHtoD(d_a, a, size), "copy vector A from host to device");
    check(cu.MemcpyHtoD(d_b, b, size), "copy vector B from host to device");

    blocks = (n + threads - 1) / threads;
    printf("CUDA kernel launch with %d blocks of %d threads\n", blocks, threads);
    void *params[] = {&d_a, &d_b, &d_c, &n};
    check(cu.LaunchKernel(kernel, blocks, 1, 1, threads, 1, 1, 0, NULL, params, NULL), "launch vectorAdd kernel");
    check(cu.CtxSynchronize(), "run vectorAdd kernel");

    printf("Copy output data from the CUDA device to the host memory\n");
    check(cu.MemcpyDtoH(c, d_c, size), "copy vector C from device to host");
    for (int i = 0; i < n; ++i) {
        if (!(fabsf(a[i] + b[i] - c[i]) <= 1e-5f)) {
            fprintf(stderr, "Result verification failed at element %d!\n", i);
            return EXIT_FAILURE;
        }
    }
    printf("Test PASSED\n");

    check(cu.MemFree(d_a), "free device vector A");
    check(cu.MemFree(d_b), "free device vector B");
    check(cu.MemFree(d_c), "free device vector C");
    check(cu.ModuleUnload(module), "unload the module");
    check(cu.DevicePrimaryCtxRelease(device), "release the primary context");
    free(a);
    free(b);
    free(c);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* The process's own run time (libcuda load to the check), for the Job's overhead. */
    fprintf(stderr, "vectorAdd: %.3f s in the process\n", (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    printf("Done\n");
    return EXIT_SUCCESS;
}
