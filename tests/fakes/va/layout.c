/* Prints, as JSON, sizeof/offsetof of every libva structure interop's ctypes bindings declare and the constants
 * they hard-code, from the real libva-dev headers. tests/test_native_libva.py compares them with interop.native.libva. */
#include <stddef.h>
#include <stdio.h>
#include <va/va.h>
#include <va/va_drmcommon.h>

static int first = 1;
static void sep(void) { printf(first ? "\n" : ",\n"); first = 0; }
#define SIZE(T) (sep(), printf("  \"sizeof %s\": %zu", #T, sizeof(T)))
#define OFF(T, f) (sep(), printf("  \"%s.%s\": [%zu, %zu]", #T, #f, offsetof(T, f), sizeof(((T *)0)->f)))
#define CONST(c) (sep(), printf("  \"%s\": %llu", #c, (unsigned long long)(c)))

int main(void)
{
    printf("{");
    SIZE(VAGenericValue); OFF(VAGenericValue, type); OFF(VAGenericValue, value);
    SIZE(VASurfaceAttrib); OFF(VASurfaceAttrib, type); OFF(VASurfaceAttrib, flags); OFF(VASurfaceAttrib, value);
    SIZE(VASurfaceAttribExternalBuffers);
    OFF(VASurfaceAttribExternalBuffers, pixel_format); OFF(VASurfaceAttribExternalBuffers, width);
    OFF(VASurfaceAttribExternalBuffers, height); OFF(VASurfaceAttribExternalBuffers, data_size);
    OFF(VASurfaceAttribExternalBuffers, num_planes); OFF(VASurfaceAttribExternalBuffers, pitches);
    OFF(VASurfaceAttribExternalBuffers, offsets); OFF(VASurfaceAttribExternalBuffers, buffers);
    OFF(VASurfaceAttribExternalBuffers, num_buffers); OFF(VASurfaceAttribExternalBuffers, flags);
    OFF(VASurfaceAttribExternalBuffers, private_data);
    SIZE(VADRMPRIMESurfaceDescriptor);
    OFF(VADRMPRIMESurfaceDescriptor, fourcc); OFF(VADRMPRIMESurfaceDescriptor, width);
    OFF(VADRMPRIMESurfaceDescriptor, height); OFF(VADRMPRIMESurfaceDescriptor, num_objects);
    OFF(VADRMPRIMESurfaceDescriptor, objects); OFF(VADRMPRIMESurfaceDescriptor, objects[0].fd);
    OFF(VADRMPRIMESurfaceDescriptor, objects[0].size); OFF(VADRMPRIMESurfaceDescriptor, objects[0].drm_format_modifier);
    OFF(VADRMPRIMESurfaceDescriptor, objects[1].drm_format_modifier);
    OFF(VADRMPRIMESurfaceDescriptor, num_layers); OFF(VADRMPRIMESurfaceDescriptor, layers);
    OFF(VADRMPRIMESurfaceDescriptor, layers[0].drm_format); OFF(VADRMPRIMESurfaceDescriptor, layers[0].num_planes);
    OFF(VADRMPRIMESurfaceDescriptor, layers[0].object_index); OFF(VADRMPRIMESurfaceDescriptor, layers[0].offset);
    OFF(VADRMPRIMESurfaceDescriptor, layers[0].pitch); OFF(VADRMPRIMESurfaceDescriptor, layers[1].drm_format);
    OFF(VADRMPRIMESurfaceDescriptor, layers[3].pitch);
    SIZE(VADRMFormatModifierList); OFF(VADRMFormatModifierList, num_modifiers); OFF(VADRMFormatModifierList, modifiers);
    SIZE(VAImageFormat); OFF(VAImageFormat, fourcc); OFF(VAImageFormat, byte_order); OFF(VAImageFormat, bits_per_pixel);
    OFF(VAImageFormat, depth); OFF(VAImageFormat, red_mask); OFF(VAImageFormat, green_mask); OFF(VAImageFormat, blue_mask);
    OFF(VAImageFormat, alpha_mask); OFF(VAImageFormat, va_reserved);
    SIZE(VAImage); OFF(VAImage, image_id); OFF(VAImage, format); OFF(VAImage, buf); OFF(VAImage, width);
    OFF(VAImage, height); OFF(VAImage, data_size); OFF(VAImage, num_planes); OFF(VAImage, pitches); OFF(VAImage, offsets);
    OFF(VAImage, num_palette_entries); OFF(VAImage, entry_bytes); OFF(VAImage, component_order); OFF(VAImage, va_reserved);

    CONST(VA_STATUS_SUCCESS); CONST(VA_STATUS_ERROR_OPERATION_FAILED); CONST(VA_STATUS_ERROR_ALLOCATION_FAILED);
    CONST(VA_STATUS_ERROR_INVALID_SURFACE); CONST(VA_STATUS_ERROR_INVALID_PARAMETER); CONST(VA_STATUS_ERROR_SURFACE_BUSY);
    CONST(VA_STATUS_ERROR_ATTR_NOT_SUPPORTED); CONST(VA_STATUS_ERROR_UNIMPLEMENTED); CONST(VA_STATUS_ERROR_INVALID_IMAGE_FORMAT);
    CONST(VA_STATUS_ERROR_UNSUPPORTED_MEMORY_TYPE); CONST(VA_STATUS_ERROR_UNKNOWN); CONST(VA_INVALID_ID);
    CONST(VA_RT_FORMAT_YUV420); CONST(VA_RT_FORMAT_YUV420_10); CONST(VA_RT_FORMAT_RGB32);
    CONST(VA_FOURCC_NV12); CONST(VA_FOURCC_I420); CONST(VA_FOURCC_YV12); CONST(VA_FOURCC_P010); CONST(VA_FOURCC_BGRX);
    CONST(VA_FOURCC_BGRA); CONST(VA_FOURCC_RGBX); CONST(VA_FOURCC_RGBA);
    CONST(VAGenericValueTypeInteger); CONST(VAGenericValueTypeFloat); CONST(VAGenericValueTypePointer); CONST(VAGenericValueTypeFunc);
    CONST(VASurfaceAttribNone); CONST(VASurfaceAttribPixelFormat); CONST(VASurfaceAttribMinWidth); CONST(VASurfaceAttribMaxWidth);
    CONST(VASurfaceAttribMinHeight); CONST(VASurfaceAttribMaxHeight); CONST(VASurfaceAttribMemoryType);
    CONST(VASurfaceAttribExternalBufferDescriptor); CONST(VASurfaceAttribUsageHint); CONST(VASurfaceAttribDRMFormatModifiers);
    CONST(VA_SURFACE_ATTRIB_GETTABLE); CONST(VA_SURFACE_ATTRIB_SETTABLE);
    CONST(VA_SURFACE_ATTRIB_MEM_TYPE_VA); CONST(VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME); CONST(VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2);
    CONST(VA_SURFACE_EXTBUF_DESC_ENABLE_TILING);
    CONST(VA_EXPORT_SURFACE_READ_ONLY); CONST(VA_EXPORT_SURFACE_WRITE_ONLY); CONST(VA_EXPORT_SURFACE_READ_WRITE);
    CONST(VA_EXPORT_SURFACE_SEPARATE_LAYERS); CONST(VA_EXPORT_SURFACE_COMPOSED_LAYERS);
    CONST(VASurfaceRendering); CONST(VASurfaceDisplaying); CONST(VASurfaceReady); CONST(VASurfaceSkipped);
    printf("\n}\n");
    return 0;
}
