/* A fake Level Zero driver for interop's conformance tests.
 *
 * Built against the real headers of Debian's libze-dev and loaded by the real loader (libze_loader.so.1)
 * through ZE_ENABLE_ALT_DRIVERS. It implements the calls interop/native/level_zero.py makes, over memfd
 * memory: every allocation is a memfd mapped MAP_SHARED, so "device" memory is host-visible here (a real
 * device's is not); importing a DMA-BUF fd maps that fd (the driver does not take ownership of it, as
 * DRM PRIME import does not); exporting dups the allocation's memfd (the caller owns the new fd).
 * System memory import (ze_external_memory_import_system_memory_t chained to zeMemAllocHost, the NPU extension
 * declared in ze_mem_import_system_memory_ext.h, copied here) hands back the caller's own pages, with the rules
 * OpenVINO's NPU plugin and driver apply: address and size page-aligned, the size the one asked for, the pages
 * mapped, no overlap with any allocation of the context; zeMemFree ends the import and leaves the memory alone.
 * zeDeviceGetExternalMemoryProperties reports DMA_BUF and STANDARD_ALLOCATION imports (FAKE_ZE_NO_SYSTEM_IMPORT=1:
 * a driver without system memory import). fake_ze_device_read() is the "device" reading through an allocation.
 * Every other entry of every DDI table returns ZE_RESULT_ERROR_UNSUPPORTED_FEATURE.
 * FAKE_ZE_DEVICE_TYPE=gpu|vpu picks the device type (default vpu, an NPU's type); FAKE_ZE_TRACE=1 logs zeInit calls.
 */
#define _GNU_SOURCE
#include <level_zero/ze_api.h>
#include <level_zero/ze_ddi.h>
#include <level_zero/zet_ddi.h>
#include <level_zero/zes_ddi.h>

#include "ze_mem_import_system_memory_ext.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

struct fake_driver { uint32_t magic; };
struct fake_device { uint32_t magic; };
struct fake_context { uint32_t magic; struct fake_context *next; };

struct fake_alloc {
    void *ptr;
    size_t size;
    int fd;               /* our memfd, or -1 for an import (then the caller keeps its fd) */
    int import_fd;        /* the imported fd (not owned), or -1 */
    int system;           /* an import of the caller's pages: never unmapped by us */
    ze_memory_type_t type;
    uint64_t id;
    ze_context_handle_t ctx;
    struct fake_alloc *next;
};

static struct fake_driver g_driver = {0x7a654452};
static struct fake_device g_device = {0x7a654456};
static struct fake_context *g_contexts;
static struct fake_alloc *g_allocs;
static uint64_t g_next_id = 1;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static ze_result_t unsupported(void) { return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE; }

static void fill_unsupported(void *table, size_t size) {
    void **slots = (void **)table;
    for (size_t i = 0; i < size / sizeof(void *); i++) slots[i] = (void *)unsupported;
}

static int context_valid(ze_context_handle_t h) {
    for (struct fake_context *c = g_contexts; c; c = c->next)
        if ((ze_context_handle_t)c == h) return 1;
    return 0;
}

/* ---- global / driver / device ---------------------------------------------------------------------- */
static ze_result_t fake_init(ze_init_flags_t flags) {
    const char *type = getenv("FAKE_ZE_DEVICE_TYPE");
    int gpu = type && strcmp(type, "gpu") == 0;
    if (getenv("FAKE_ZE_TRACE")) fprintf(stderr, "fake_ze: zeInit(0x%x)\n", (unsigned)flags);
    if ((flags & ZE_INIT_FLAG_GPU_ONLY) && !gpu) return ZE_RESULT_ERROR_UNINITIALIZED;
    if ((flags & ZE_INIT_FLAG_VPU_ONLY) && gpu) return ZE_RESULT_ERROR_UNINITIALIZED;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_driver_get(uint32_t *count, ze_driver_handle_t *drivers) {
    if (!count) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (*count == 0 || !drivers) { *count = 1; return ZE_RESULT_SUCCESS; }
    drivers[0] = (ze_driver_handle_t)&g_driver;
    *count = 1;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_driver_get_api_version(ze_driver_handle_t d, ze_api_version_t *v) {
    if (!d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!v) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    *v = ZE_API_VERSION_CURRENT;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_driver_get_properties(ze_driver_handle_t d, ze_driver_properties_t *p) {
    if (!d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!p) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    memset(p->uuid.id, 0, sizeof p->uuid.id);
    memcpy(p->uuid.id, "interop-fake-ze", 15);
    p->driverVersion = 0x00010008;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_driver_get_extension_properties(ze_driver_handle_t d, uint32_t *count,
                                                        ze_driver_extension_properties_t *props) {
    static const char *names[] = {"ZE_extension_external_memory_import_fd", "ZE_extension_external_memory_export_fd"};
    if (!d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!count) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (*count == 0 || !props) { *count = 2; return ZE_RESULT_SUCCESS; }
    uint32_t n = *count < 2 ? *count : 2;
    for (uint32_t i = 0; i < n; i++) {
        snprintf(props[i].name, sizeof props[i].name, "%s", names[i]);
        props[i].version = 1;
    }
    *count = n;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_device_get(ze_driver_handle_t d, uint32_t *count, ze_device_handle_t *devices) {
    if (!d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!count) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (*count == 0 || !devices) { *count = 1; return ZE_RESULT_SUCCESS; }
    devices[0] = (ze_device_handle_t)&g_device;
    *count = 1;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_device_get_properties(ze_device_handle_t dev, ze_device_properties_t *p) {
    const char *type = getenv("FAKE_ZE_DEVICE_TYPE");
    int gpu = type && strcmp(type, "gpu") == 0;
    if (!dev) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!p) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    p->type = gpu ? ZE_DEVICE_TYPE_GPU : ZE_DEVICE_TYPE_VPU;
    p->vendorId = 0x8086;
    p->deviceId = 0xfa4e;
    p->flags = ZE_DEVICE_PROPERTY_FLAG_INTEGRATED;
    p->subdeviceId = 0;
    p->coreClockRate = 1000;
    p->maxMemAllocSize = (uint64_t)1 << 32;
    p->maxHardwareContexts = 64;
    p->maxCommandQueuePriority = 0;
    p->numThreadsPerEU = 1;
    p->physicalEUSimdWidth = 1;
    p->numEUsPerSubslice = 1;
    p->numSubslicesPerSlice = 1;
    p->numSlices = 1;
    p->timerResolution = 1;
    p->timestampValidBits = 64;
    p->kernelTimestampValidBits = 64;
    memset(p->uuid.id, 0, sizeof p->uuid.id);
    memcpy(p->uuid.id, "fake-ze-device", 14);
    snprintf(p->name, sizeof p->name, "interop fake Level Zero %s", gpu ? "GPU" : "NPU");
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_device_get_external_memory_properties(ze_device_handle_t dev,
                                                              ze_device_external_memory_properties_t *p) {
    if (!dev) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!p) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (p->stype != ZE_STRUCTURE_TYPE_DEVICE_EXTERNAL_MEMORY_PROPERTIES) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    p->memoryAllocationImportTypes = ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF;
    if (!getenv("FAKE_ZE_NO_SYSTEM_IMPORT")) p->memoryAllocationImportTypes |= ZE_EXTERNAL_MEMORY_TYPE_FLAG_STANDARD_ALLOCATION;
    p->memoryAllocationExportTypes = ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF;
    p->imageImportTypes = 0;
    p->imageExportTypes = 0;
    return ZE_RESULT_SUCCESS;
}

/* ---- contexts ----------------------------------------------------------------------------------------- */
static ze_result_t fake_context_create(ze_driver_handle_t d, const ze_context_desc_t *desc, ze_context_handle_t *out) {
    if (!d) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!desc || !out) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (desc->stype != ZE_STRUCTURE_TYPE_CONTEXT_DESC) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    struct fake_context *c = calloc(1, sizeof *c);
    if (!c) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    c->magic = 0x7a654358;
    pthread_mutex_lock(&g_lock);
    c->next = g_contexts;
    g_contexts = c;
    pthread_mutex_unlock(&g_lock);
    *out = (ze_context_handle_t)c;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_context_destroy(ze_context_handle_t h) {
    pthread_mutex_lock(&g_lock);
    struct fake_context **pp = &g_contexts;
    while (*pp && (ze_context_handle_t)*pp != h) pp = &(*pp)->next;
    if (!*pp) { pthread_mutex_unlock(&g_lock); return ZE_RESULT_ERROR_INVALID_NULL_HANDLE; }
    for (struct fake_alloc *a = g_allocs; a; a = a->next)
        if (a->ctx == h) { pthread_mutex_unlock(&g_lock); return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE; }
    struct fake_context *c = *pp;
    *pp = c->next;
    pthread_mutex_unlock(&g_lock);
    free(c);
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_context_get_status(ze_context_handle_t h) {
    return context_valid(h) ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
}

/* ---- memory ------------------------------------------------------------------------------------------- */
/* Walk a pNext chain for an import descriptor; reject what we do not know the way a driver would. */
static ze_result_t find_import(const void *pnext, int *fd, const ze_external_memory_import_system_memory_t **sys) {
    *fd = -1;
    if (sys) *sys = NULL;
    for (const ze_base_desc_t *b = pnext; b; b = b->pNext) {
        if (b->stype == (ze_structure_type_t)ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_SYSTEM_MEMORY) {
            if (!sys || getenv("FAKE_ZE_NO_SYSTEM_IMPORT")) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
            *sys = (const void *)b;
            continue;
        }
        if (b->stype == ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_FD) {
            const ze_external_memory_import_fd_t *imp = (const void *)b;
            if (!(imp->flags & ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF)) return ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION;
            if (imp->fd < 0) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
            *fd = imp->fd;
        } else if (b->stype != ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_DESC) {
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
    }
    return ZE_RESULT_SUCCESS;
}

static int overlaps(ze_context_handle_t ctx, uintptr_t start, uintptr_t end) {
    for (struct fake_alloc *a = g_allocs; a; a = a->next)
        if (a->ctx == ctx && start < (uintptr_t)a->ptr + a->size && (uintptr_t)a->ptr < end) return 1;
    return 0;
}

/* The caller's pages become the allocation: the rules of the NPU plugin (zero_mem.cpp) and driver. */
static ze_result_t import_system(ze_context_handle_t ctx, const ze_external_memory_import_system_memory_t *sys,
                                 size_t size, void **out) {
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t p = (uintptr_t)sys->pSystemMemory;
    if (!p) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (p % 4096 || sys->size % 4096 || p % (uintptr_t)page) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
    if (sys->size != size || size == 0) return ZE_RESULT_ERROR_INVALID_SIZE;
    /* every page must be mapped: a driver pins them */
    size_t npages = size / (size_t)page;
    unsigned char *vec = malloc(npages);
    if (!vec) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    int mapped = mincore(sys->pSystemMemory, size, vec) == 0;
    free(vec);
    if (!mapped) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    struct fake_alloc *a = calloc(1, sizeof *a);
    if (!a) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    pthread_mutex_lock(&g_lock);
    if (overlaps(ctx, p, p + size)) { pthread_mutex_unlock(&g_lock); free(a); return ZE_RESULT_ERROR_OVERLAPPING_REGIONS; }
    a->ptr = sys->pSystemMemory; a->size = size; a->fd = -1; a->import_fd = -1; a->system = 1;
    a->type = ZE_MEMORY_TYPE_HOST; a->ctx = ctx;
    a->id = g_next_id++;
    a->next = g_allocs;
    g_allocs = a;
    pthread_mutex_unlock(&g_lock);
    *out = sys->pSystemMemory;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t alloc_common(ze_context_handle_t ctx, const void *pnext, size_t size, ze_memory_type_t type, void **out) {
    if (!ctx) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!out) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (size == 0) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
    if (!context_valid(ctx)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    int import_fd;
    const ze_external_memory_import_system_memory_t *sys = NULL;
    ze_result_t r = find_import(pnext, &import_fd, type == ZE_MEMORY_TYPE_HOST ? &sys : NULL);
    if (r != ZE_RESULT_SUCCESS) return r;
    if (sys) {
        if (import_fd >= 0) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        return import_system(ctx, sys, size, out);
    }
    int fd = -1, map_fd;
    if (import_fd >= 0) {
        struct stat st;
        if (fstat(import_fd, &st) != 0) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        if ((uint64_t)st.st_size < size) return ZE_RESULT_ERROR_INVALID_SIZE;
        map_fd = import_fd;
    } else {
        fd = memfd_create("fake-ze-alloc", MFD_CLOEXEC);
        if (fd < 0) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
        if (ftruncate(fd, (off_t)size) != 0) { close(fd); return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY; }
        map_fd = fd;
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, map_fd, 0);
    if (p == MAP_FAILED) { if (fd >= 0) close(fd); return ZE_RESULT_ERROR_INVALID_ARGUMENT; }
    struct fake_alloc *a = calloc(1, sizeof *a);
    if (!a) { munmap(p, size); if (fd >= 0) close(fd); return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY; }
    a->ptr = p; a->size = size; a->fd = fd; a->import_fd = import_fd; a->type = type; a->ctx = ctx;
    pthread_mutex_lock(&g_lock);
    a->id = g_next_id++;
    a->next = g_allocs;
    g_allocs = a;
    pthread_mutex_unlock(&g_lock);
    *out = p;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_mem_alloc_host(ze_context_handle_t ctx, const ze_host_mem_alloc_desc_t *desc, size_t size,
                                       size_t align, void **out) {
    (void)align;
    if (!desc) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (desc->stype != ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    return alloc_common(ctx, desc->pNext, size, ZE_MEMORY_TYPE_HOST, out);
}

static ze_result_t fake_mem_alloc_device(ze_context_handle_t ctx, const ze_device_mem_alloc_desc_t *desc, size_t size,
                                         size_t align, ze_device_handle_t dev, void **out) {
    (void)align;
    if (!dev) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!desc) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (desc->stype != ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    return alloc_common(ctx, desc->pNext, size, ZE_MEMORY_TYPE_DEVICE, out);
}

static ze_result_t fake_mem_alloc_shared(ze_context_handle_t ctx, const ze_device_mem_alloc_desc_t *ddesc,
                                         const ze_host_mem_alloc_desc_t *hdesc, size_t size, size_t align,
                                         ze_device_handle_t dev, void **out) {
    (void)align; (void)dev;
    if (!ddesc || !hdesc) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (ddesc->stype != ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC || hdesc->stype != ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC)
        return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    return alloc_common(ctx, ddesc->pNext, size, ZE_MEMORY_TYPE_SHARED, out);
}

static struct fake_alloc *find_alloc(ze_context_handle_t ctx, const void *ptr) {
    for (struct fake_alloc *a = g_allocs; a; a = a->next)
        if (a->ctx == ctx && (const char *)ptr >= (char *)a->ptr && (const char *)ptr < (char *)a->ptr + a->size) return a;
    return NULL;
}

static ze_result_t fake_mem_free(ze_context_handle_t ctx, void *ptr) {
    if (!ctx) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!ptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    pthread_mutex_lock(&g_lock);
    struct fake_alloc **pp = &g_allocs;
    while (*pp && !((*pp)->ctx == ctx && (*pp)->ptr == ptr)) pp = &(*pp)->next;
    if (!*pp) { pthread_mutex_unlock(&g_lock); return ZE_RESULT_ERROR_INVALID_ARGUMENT; }
    struct fake_alloc *a = *pp;
    *pp = a->next;
    pthread_mutex_unlock(&g_lock);
    if (!a->system) munmap(a->ptr, a->size);
    if (a->fd >= 0) close(a->fd);
    free(a);
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_mem_get_alloc_properties(ze_context_handle_t ctx, const void *ptr,
                                                 ze_memory_allocation_properties_t *props, ze_device_handle_t *dev) {
    if (!ctx) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!ptr || !props) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    pthread_mutex_lock(&g_lock);
    struct fake_alloc *a = find_alloc(ctx, ptr);
    if (!a) {
        pthread_mutex_unlock(&g_lock);
        props->type = ZE_MEMORY_TYPE_UNKNOWN;
        props->id = 0;
        props->pageSize = 0;
        if (dev) *dev = NULL;
        return ZE_RESULT_SUCCESS;
    }
    props->type = a->type;
    props->id = a->id;
    props->pageSize = 4096;
    if (dev) *dev = a->type == ZE_MEMORY_TYPE_HOST ? NULL : (ze_device_handle_t)&g_device;
    for (ze_base_desc_t *b = props->pNext; b; b = (ze_base_desc_t *)b->pNext) {
        if (b->stype == ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_FD) {
            ze_external_memory_export_fd_t *exp = (void *)b;
            if (!(exp->flags & ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF)) {
                pthread_mutex_unlock(&g_lock);
                return ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION;
            }
            if (a->system) { pthread_mutex_unlock(&g_lock); return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE; }
            int src = a->fd >= 0 ? a->fd : a->import_fd;
            exp->fd = fcntl(src, F_DUPFD_CLOEXEC, 0);
            if (exp->fd < 0) { pthread_mutex_unlock(&g_lock); return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY; }
        }
    }
    pthread_mutex_unlock(&g_lock);
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_mem_get_address_range(ze_context_handle_t ctx, const void *ptr, void **base, size_t *size) {
    if (!ctx) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!ptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    pthread_mutex_lock(&g_lock);
    struct fake_alloc *a = find_alloc(ctx, ptr);
    pthread_mutex_unlock(&g_lock);
    if (!a) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    if (base) *base = a->ptr;
    if (size) *size = a->size;
    return ZE_RESULT_SUCCESS;
}

/* ---- immediate command lists: only synchronous copies ---------------------------------------------------- */
struct fake_cmdlist { uint32_t magic; ze_context_handle_t ctx; };

static ze_result_t fake_cmdlist_create_immediate(ze_context_handle_t ctx, ze_device_handle_t dev,
                                                 const ze_command_queue_desc_t *desc, ze_command_list_handle_t *out) {
    if (!ctx || !dev) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!desc || !out) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (desc->stype != ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    if (desc->mode != ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    if (!context_valid(ctx)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    struct fake_cmdlist *l = calloc(1, sizeof *l);
    if (!l) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
    l->magic = 0x7a65434c;
    l->ctx = ctx;
    *out = (ze_command_list_handle_t)l;
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_cmdlist_destroy(ze_command_list_handle_t h) {
    if (!h) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    free(h);
    return ZE_RESULT_SUCCESS;
}

static ze_result_t fake_cmdlist_append_copy(ze_command_list_handle_t h, void *dst, const void *src, size_t size,
                                            ze_event_handle_t signal, uint32_t nwait, ze_event_handle_t *waits) {
    (void)signal; (void)waits;
    if (!h) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!dst || !src) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    if (nwait) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    memmove(dst, src, size); /* synchronous: done on return */
    return ZE_RESULT_SUCCESS;
}

/* The device reading memory, for the tests (not a Level Zero call): a device reaches only memory that is an
 * allocation of the context (its own, or imported), so [ptr, ptr + size) must lie inside one. Copies it to out. */
EXPORT ze_result_t fake_ze_device_read(ze_context_handle_t ctx, const void *ptr, size_t size, void *out) {
    if (!ctx) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!ptr || !out) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    pthread_mutex_lock(&g_lock);
    struct fake_alloc *a = find_alloc(ctx, ptr);
    int inside = a && (const char *)ptr + size <= (char *)a->ptr + a->size;
    if (inside) memcpy(out, ptr, size);
    pthread_mutex_unlock(&g_lock);
    return inside ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

/* ---- DDI table entry points the loader looks up ------------------------------------------------------- */
EXPORT ze_result_t ZE_APICALL zeGetGlobalProcAddrTable(ze_api_version_t v, ze_global_dditable_t *t) {
    (void)v;
    if (!t) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    fill_unsupported(t, sizeof *t);
    t->pfnInit = fake_init;
    return ZE_RESULT_SUCCESS;
}

EXPORT ze_result_t ZE_APICALL zeGetDriverProcAddrTable(ze_api_version_t v, ze_driver_dditable_t *t) {
    (void)v;
    if (!t) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    fill_unsupported(t, sizeof *t);
    t->pfnGet = fake_driver_get;
    t->pfnGetApiVersion = fake_driver_get_api_version;
    t->pfnGetProperties = fake_driver_get_properties;
    t->pfnGetExtensionProperties = fake_driver_get_extension_properties;
    return ZE_RESULT_SUCCESS;
}

EXPORT ze_result_t ZE_APICALL zeGetDeviceProcAddrTable(ze_api_version_t v, ze_device_dditable_t *t) {
    (void)v;
    if (!t) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    fill_unsupported(t, sizeof *t);
    t->pfnGet = fake_device_get;
    t->pfnGetProperties = fake_device_get_properties;
    t->pfnGetExternalMemoryProperties = fake_device_get_external_memory_properties;
    return ZE_RESULT_SUCCESS;
}

EXPORT ze_result_t ZE_APICALL zeGetContextProcAddrTable(ze_api_version_t v, ze_context_dditable_t *t) {
    (void)v;
    if (!t) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    fill_unsupported(t, sizeof *t);
    t->pfnCreate = fake_context_create;
    t->pfnDestroy = fake_context_destroy;
    t->pfnGetStatus = fake_context_get_status;
    return ZE_RESULT_SUCCESS;
}

EXPORT ze_result_t ZE_APICALL zeGetMemProcAddrTable(ze_api_version_t v, ze_mem_dditable_t *t) {
    (void)v;
    if (!t) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    fill_unsupported(t, sizeof *t);
    t->pfnAllocHost = fake_mem_alloc_host;
    t->pfnAllocDevice = fake_mem_alloc_device;
    t->pfnAllocShared = fake_mem_alloc_shared;
    t->pfnFree = fake_mem_free;
    t->pfnGetAllocProperties = fake_mem_get_alloc_properties;
    t->pfnGetAddressRange = fake_mem_get_address_range;
    return ZE_RESULT_SUCCESS;
}

EXPORT ze_result_t ZE_APICALL zeGetCommandListProcAddrTable(ze_api_version_t v, ze_command_list_dditable_t *t) {
    (void)v;
    if (!t) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    fill_unsupported(t, sizeof *t);
    t->pfnCreateImmediate = fake_cmdlist_create_immediate;
    t->pfnDestroy = fake_cmdlist_destroy;
    t->pfnAppendMemoryCopy = fake_cmdlist_append_copy;
    return ZE_RESULT_SUCCESS;
}

/* Every other table of ze/zet/zes that the headers declare: all entries unsupported.
 * fake_ze_tables.inc is generated from the installed headers by tests/prepare.d/fakes_ze.sh. */
#define FAKE_TABLE(getter, type)                                                         \
    EXPORT ze_result_t ZE_APICALL getter(ze_api_version_t v, type *t) {                  \
        (void)v;                                                                         \
        if (!t) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;                             \
        fill_unsupported(t, sizeof *t);                                                  \
        return ZE_RESULT_SUCCESS;                                                        \
    }
#include "fake_ze_tables.inc"
