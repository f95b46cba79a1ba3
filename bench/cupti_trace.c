/* Kernel timeline of any CUDA program, captured graphs included (one record per graph
 * node), through CUPTI's activity API. A measurement tool for the GPU machine, not part of
 * the engine build:
 *
 *   gcc -O2 -shared -fPIC -I/usr/local/cuda/include bench/cupti_trace.c \
 *       -L/usr/local/cuda/lib64 -lcupti -o libobtrace.so
 *   CUDA_INJECTION64_PATH=$PWD/libobtrace.so ONEBIT_TRACE_OUT=trace.tsv 1bit bench ...
 *   python3 bench/trace_step.py trace.tsv
 *
 * Each line of the output: start and end (ns, GPU clock), grid and block size, registers,
 * dynamic shared memory, graph id, and the kernel's (mangled) name. Concurrent-kernel
 * tracing keeps programmatic dependent launch overlaps as they are. */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define BUF_SIZE (8u << 20)

static FILE *g_out;

static void CUPTIAPI buf_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    *buf = aligned_alloc(8, BUF_SIZE);
    *size = *buf ? BUF_SIZE : 0;
    *max_records = 0;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                   size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        if (g_out)
            fprintf(g_out, "%llu\t%llu\t%d\t%d\t%u\t%d\t%u\t%s\n", (unsigned long long)k->start,
                    (unsigned long long)k->end, k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ,
                    (unsigned)k->registersPerThread, k->dynamicSharedMemory, k->graphId,
                    k->name ? k->name : "?");
    }
    free(buf);
}

static void at_exit(void)
{
    cuptiActivityFlushAll(1);
    if (g_out)
        fclose(g_out);
    g_out = NULL;
}

int InitializeInjection(void);
int InitializeInjection(void)
{
    const char *path = getenv("ONEBIT_TRACE_OUT");
    g_out = fopen(path ? path : "trace.tsv", "w");
    if (!g_out)
        return 0;
    if (cuptiActivityRegisterCallbacks(buf_requested, buf_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti_trace: CUPTI refused the activity setup\n");
        return 0;
    }
    atexit(at_exit);
    return 1;
}
