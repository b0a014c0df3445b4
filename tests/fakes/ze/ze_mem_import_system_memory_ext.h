/* The declaration of ze_external_memory_import_system_memory_t, from the Level Zero NPU extension header
 * ze_mem_import_system_memory_ext.h that OpenVINO's NPU plugin includes (src/plugins/intel_npu/thirdparty/
 * level-zero-ext). That header is not packaged for Debian (libze-dev 1.8.12 has no system-memory import) and is not
 * on this machine, so its documented layout is copied here: the fake driver is built against this copy and
 * tests/test_native_level_zero_layout.py checks interop's ctypes structure against it. The extension declares
 * stype as ze_structure_type_graph_ext_t, an enum of the graph extension (32 bits, like ze_structure_type_t).
 */
#ifndef INTEROP_ZE_MEM_IMPORT_SYSTEM_MEMORY_EXT_H
#define INTEROP_ZE_MEM_IMPORT_SYSTEM_MEMORY_EXT_H
#include <level_zero/ze_api.h>
#include <stdint.h>

#ifndef ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_SYSTEM_MEMORY
typedef uint32_t ze_structure_type_graph_ext_t; /* an enum in ze_graph_ext.h */

/* May be chained to zeMemAllocHost through ze_host_mem_alloc_desc_t.pNext to import system memory. */
typedef struct _ze_external_memory_import_system_memory_t {
    ze_structure_type_graph_ext_t stype; /* ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_SYSTEM_MEMORY */
    const void *pNext;
    void *pSystemMemory;                 /* system memory pointer to import; must be page-aligned */
    const uint64_t size;                 /* size of the system memory to import; must be page-aligned */
} ze_external_memory_import_system_memory_t;

#define ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_IMPORT_SYSTEM_MEMORY 0x24
#define ZE_EXTERNAL_MEMORY_TYPE_FLAG_STANDARD_ALLOCATION 0x100
#endif

#endif
