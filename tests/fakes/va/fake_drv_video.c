/*
 * interop's conformance fake of a VA-API driver ("interopfake_drv_video.so").
 *
 * Built against the real headers of Debian's libva-dev and loaded by the real libva.so.2 (an X11 display under
 * Xvfb with LIBVA_DRIVER_NAME=interopfake and LIBVA_DRIVERS_PATH pointing here). Surfaces are sealed memfds:
 * NV12 / I420 / P010 / 32-bit RGB, with padded pitches and a chroma offset that is NOT pitch*height, so code that
 * computes offsets instead of reading them fails. Import (DRM PRIME 2 and legacy DRM PRIME external buffers)
 * adopts dups of the caller's fds; export gives new dups with every plane's offset and pitch and the 64-bit
 * modifier; vaDeriveImage + vaMapBuffer give the memfd mapping itself. The driver is strict where real drivers
 * would misbehave: a surface used on another display, destroyed while a derived image is alive, or a mapped
 * buffer left mapped at vaDestroyImage are errors. fakeva_* functions let tests look inside.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <va/va.h>
#include <va/va_backend.h>
#include <va/va_drmcommon.h>

#define FOURCC(a, b, c, d) ((uint32_t)(a) | ((uint32_t)(b) << 8) | ((uint32_t)(c) << 16) | ((uint32_t)(d) << 24))
/* DRM fourccs (drm_fourcc.h is not in libva-dev; the values are the kernel's). */
#define DRM_NV12 FOURCC('N', 'V', '1', '2')
#define DRM_P010 FOURCC('P', '0', '1', '0')
#define DRM_YUV420 FOURCC('Y', 'U', '1', '2')
#define DRM_R8 FOURCC('R', '8', ' ', ' ')
#define DRM_GR88 FOURCC('G', 'R', '8', '8')
#define DRM_R16 FOURCC('R', '1', '6', ' ')
#define DRM_GR1616 FOURCC('G', 'R', '3', '2')
#define DRM_XRGB8888 FOURCC('X', 'R', '2', '4')
#define DRM_ARGB8888 FOURCC('A', 'R', '2', '4')
#define DRM_XBGR8888 FOURCC('X', 'B', '2', '4')
#define DRM_ABGR8888 FOURCC('A', 'B', '2', '4')

#define MAX_SURFACES 4096
#define MAX_IMAGES 1024
#define MAX_BUFFERS 1024
#define SURFACE_BASE 0x1000u /* ids that are not array indices, so callers cannot confuse the two */
#define IMAGE_BASE 0x2000u
#define BUFFER_BASE 0x3000u

typedef struct {
    int fd;
    uint32_t size;
    uint64_t modifier;
    uint8_t *map;
} fake_object;

typedef struct {
    uint32_t object, offset, pitch, rows, row_bytes;
} fake_plane;

typedef struct {
    int used;
    VADriverContextP ctx;
    uint32_t fourcc, width, height, mem_type;
    uint32_t num_objects, num_planes;
    fake_object obj[4];
    fake_plane plane[4];
    int images;        /* derived images alive */
    unsigned syncs;    /* vaSyncSurface calls */
    unsigned exports;  /* vaExportSurfaceHandle calls */
    uint32_t export_flags;
} fake_surface;

typedef struct {
    int used;
    VADriverContextP ctx;
    VAImage image;
    VASurfaceID surface;
} fake_image;

typedef struct {
    int used;
    VADriverContextP ctx;
    VABufferType type;
    uint8_t *data;      /* malloc'd, or the image's surface mapping */
    uint32_t size;
    VAImageID image;
    int maps;
} fake_buffer;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fake_surface surfaces[MAX_SURFACES];
static fake_image images[MAX_IMAGES];
static fake_buffer buffers[MAX_BUFFERS];

/* ---- formats ------------------------------------------------------------------------------------------------ */

typedef struct {
    uint32_t fourcc, rt_format, drm_format, bpp;
    uint32_t num_planes;
    uint32_t sub_x[3], sub_y[3], bytes_per_elem[3], separate_drm[3];
} fake_format;

static const fake_format formats[] = {
    {VA_FOURCC_NV12, VA_RT_FORMAT_YUV420, DRM_NV12, 12, 2, {1, 2}, {1, 2}, {1, 2}, {DRM_R8, DRM_GR88}},
    {VA_FOURCC_P010, VA_RT_FORMAT_YUV420_10, DRM_P010, 24, 2, {1, 2}, {1, 2}, {2, 4}, {DRM_R16, DRM_GR1616}},
    {VA_FOURCC_I420, VA_RT_FORMAT_YUV420, DRM_YUV420, 12, 3, {1, 2, 2}, {1, 2, 2}, {1, 1, 1}, {DRM_R8, DRM_R8, DRM_R8}},
    {VA_FOURCC_BGRX, VA_RT_FORMAT_RGB32, DRM_XRGB8888, 32, 1, {1}, {1}, {4}, {DRM_XRGB8888}},
    {VA_FOURCC_BGRA, VA_RT_FORMAT_RGB32, DRM_ARGB8888, 32, 1, {1}, {1}, {4}, {DRM_ARGB8888}},
    {VA_FOURCC_RGBX, VA_RT_FORMAT_RGB32, DRM_XBGR8888, 32, 1, {1}, {1}, {4}, {DRM_XBGR8888}},
    {VA_FOURCC_RGBA, VA_RT_FORMAT_RGB32, DRM_ABGR8888, 32, 1, {1}, {1}, {4}, {DRM_ABGR8888}},
};
#define NUM_FORMATS (sizeof(formats) / sizeof(formats[0]))

static const fake_format *find_format(uint32_t fourcc)
{
    for (unsigned i = 0; i < NUM_FORMATS; i++)
        if (formats[i].fourcc == fourcc)
            return &formats[i];
    return NULL;
}

static uint32_t align_up(uint32_t v, uint32_t a) { return (v + a - 1) / a * a; }
static uint32_t ceil_div(uint32_t v, uint32_t d) { return (v + d - 1) / d; }

static fake_surface *get_surface(VADriverContextP ctx, VASurfaceID id)
{
    if (id < SURFACE_BASE || id >= SURFACE_BASE + MAX_SURFACES)
        return NULL;
    fake_surface *s = &surfaces[id - SURFACE_BASE];
    /* a surface id belongs to the display that made it: using it on another one is a caller bug */
    return s->used && s->ctx == ctx ? s : NULL;
}

static fake_image *get_image(VADriverContextP ctx, VAImageID id)
{
    if (id < IMAGE_BASE || id >= IMAGE_BASE + MAX_IMAGES)
        return NULL;
    fake_image *im = &images[id - IMAGE_BASE];
    return im->used && im->ctx == ctx ? im : NULL;
}

static fake_buffer *get_buffer(VADriverContextP ctx, VABufferID id)
{
    if (id < BUFFER_BASE || id >= BUFFER_BASE + MAX_BUFFERS)
        return NULL;
    fake_buffer *b = &buffers[id - BUFFER_BASE];
    return b->used && b->ctx == ctx ? b : NULL;
}

static void free_surface(fake_surface *s)
{
    for (uint32_t i = 0; i < s->num_objects; i++) {
        if (s->obj[i].map && s->obj[i].map != MAP_FAILED)
            munmap(s->obj[i].map, s->obj[i].size);
        if (s->obj[i].fd >= 0)
            close(s->obj[i].fd);
    }
    memset(s, 0, sizeof(*s));
}

static int map_object(fake_object *o)
{
    o->map = mmap(NULL, o->size, PROT_READ | PROT_WRITE, MAP_SHARED, o->fd, 0);
    return o->map == MAP_FAILED ? -1 : 0;
}

static uint64_t fd_size(int fd)
{
    off_t end = lseek(fd, 0, SEEK_END);
    return end < 0 ? 0 : (uint64_t)end;
}

/* ---- surfaces --------------------------------------------------------------------------------------------- */

/* Our own allocation: one sealed memfd, pitches padded to 128 bytes, planes 4096-aligned with rows padded to 32. */
static VAStatus alloc_native(fake_surface *s, const fake_format *f, uint64_t modifier)
{
    uint32_t off = 0;
    s->num_planes = f->num_planes;
    for (uint32_t p = 0; p < f->num_planes; p++) {
        uint32_t w = ceil_div(s->width, f->sub_x[p]), h = ceil_div(s->height, f->sub_y[p]);
        fake_plane *pl = &s->plane[p];
        pl->object = 0;
        pl->row_bytes = w * f->bytes_per_elem[p];
        pl->rows = h;
        pl->pitch = align_up(pl->row_bytes, 128);
        pl->offset = off;
        off = align_up(off + pl->pitch * align_up(h, 32), 4096);
    }
    int fd = memfd_create("interopfake-va-surface", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return VA_STATUS_ERROR_ALLOCATION_FAILED;
    if (ftruncate(fd, off) != 0) {
        close(fd);
        return VA_STATUS_ERROR_ALLOCATION_FAILED;
    }
    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
    s->num_objects = 1;
    s->obj[0].fd = fd;
    s->obj[0].size = off;
    s->obj[0].modifier = modifier;
    s->mem_type = VA_SURFACE_ATTRIB_MEM_TYPE_VA;
    return map_object(&s->obj[0]) ? VA_STATUS_ERROR_ALLOCATION_FAILED : VA_STATUS_SUCCESS;
}

static VAStatus check_planes(fake_surface *s, const fake_format *f)
{
    if (s->num_planes != f->num_planes)
        return VA_STATUS_ERROR_INVALID_PARAMETER;
    for (uint32_t p = 0; p < s->num_planes; p++) {
        fake_plane *pl = &s->plane[p];
        pl->row_bytes = ceil_div(s->width, f->sub_x[p]) * f->bytes_per_elem[p];
        pl->rows = ceil_div(s->height, f->sub_y[p]);
        if (pl->object >= s->num_objects || pl->pitch < pl->row_bytes)
            return VA_STATUS_ERROR_INVALID_PARAMETER;
        uint64_t end = (uint64_t)pl->offset + (uint64_t)pl->pitch * (pl->rows - 1) + pl->row_bytes;
        if (end > s->obj[pl->object].size)
            return VA_STATUS_ERROR_INVALID_PARAMETER;
    }
    return VA_STATUS_SUCCESS;
}

static VAStatus adopt_object(fake_object *o, int fd, uint32_t size, uint64_t modifier)
{
    uint64_t have = fd_size(fd);
    if (fd < 0 || have == 0)
        return VA_STATUS_ERROR_INVALID_PARAMETER;
    if (size == 0)
        size = (uint32_t)have;
    if (size > have)
        return VA_STATUS_ERROR_INVALID_PARAMETER;
    o->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0); /* like drmPrimeFDToHandle: the caller keeps its fd */
    if (o->fd < 0)
        return VA_STATUS_ERROR_ALLOCATION_FAILED;
    o->size = size;
    o->modifier = modifier;
    return map_object(o) ? VA_STATUS_ERROR_ALLOCATION_FAILED : VA_STATUS_SUCCESS;
}

static VAStatus import_prime2(fake_surface *s, const VADRMPRIMESurfaceDescriptor *d, const fake_format *f)
{
    if (d->fourcc != f->fourcc || d->width < s->width || d->height < s->height || d->num_objects < 1 ||
        d->num_objects > 4 || d->num_layers < 1 || d->num_layers > 4)
        return VA_STATUS_ERROR_INVALID_PARAMETER;
    s->num_objects = d->num_objects;
    for (uint32_t i = 0; i < 4; i++)
        s->obj[i].fd = -1;
    for (uint32_t i = 0; i < d->num_objects; i++) {
        VAStatus st = adopt_object(&s->obj[i], d->objects[i].fd, d->objects[i].size, d->objects[i].drm_format_modifier);
        if (st != VA_STATUS_SUCCESS)
            return st;
    }
    s->num_planes = 0;
    for (uint32_t l = 0; l < d->num_layers; l++) {
        for (uint32_t j = 0; j < d->layers[l].num_planes; j++) {
            if (s->num_planes >= 4 || j >= 4)
                return VA_STATUS_ERROR_INVALID_PARAMETER;
            fake_plane *pl = &s->plane[s->num_planes++];
            pl->object = d->layers[l].object_index[j];
            pl->offset = d->layers[l].offset[j];
            pl->pitch = d->layers[l].pitch[j];
        }
    }
    s->mem_type = VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2;
    return check_planes(s, f);
}

static VAStatus import_extbuf(fake_surface *s, const VASurfaceAttribExternalBuffers *e, const fake_format *f, unsigned index)
{
    /* legacy DRM_PRIME: buffers[i] is the fd of surface i, every plane lives in it; no modifier can be given */
    if (e->pixel_format != f->fourcc || e->width < s->width || e->height < s->height || !e->buffers ||
        index >= e->num_buffers || e->num_planes < 1 || e->num_planes > 4)
        return VA_STATUS_ERROR_INVALID_PARAMETER;
    for (uint32_t i = 0; i < 4; i++)
        s->obj[i].fd = -1;
    s->num_objects = 1;
    VAStatus st = adopt_object(&s->obj[0], (int)e->buffers[index], e->data_size, 0 /* DRM_FORMAT_MOD_LINEAR */);
    if (st != VA_STATUS_SUCCESS)
        return st;
    s->num_planes = e->num_planes;
    for (uint32_t p = 0; p < e->num_planes; p++) {
        s->plane[p].object = 0;
        s->plane[p].offset = e->offsets[p];
        s->plane[p].pitch = e->pitches[p];
    }
    s->mem_type = VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME;
    return check_planes(s, f);
}

static VAStatus fake_CreateSurfaces2(VADriverContextP ctx, unsigned int format, unsigned int width, unsigned int height,
                                     VASurfaceID *out, unsigned int num, VASurfaceAttrib *attribs, unsigned int num_attribs)
{
    uint32_t fourcc = 0, mem_type = VA_SURFACE_ATTRIB_MEM_TYPE_VA;
    void *desc = NULL;
    uint64_t modifier = 0;
    for (unsigned i = 0; i < num_attribs; i++) {
        VASurfaceAttrib *a = &attribs[i];
        if (!(a->flags & VA_SURFACE_ATTRIB_SETTABLE))
            continue;
        switch (a->type) {
        case VASurfaceAttribPixelFormat:
            if (a->value.type != VAGenericValueTypeInteger)
                return VA_STATUS_ERROR_INVALID_PARAMETER;
            fourcc = (uint32_t)a->value.value.i;
            break;
        case VASurfaceAttribMemoryType:
            if (a->value.type != VAGenericValueTypeInteger)
                return VA_STATUS_ERROR_INVALID_PARAMETER;
            mem_type = (uint32_t)a->value.value.i;
            break;
        case VASurfaceAttribExternalBufferDescriptor:
            if (a->value.type != VAGenericValueTypePointer)
                return VA_STATUS_ERROR_INVALID_PARAMETER;
            desc = a->value.value.p;
            break;
        case VASurfaceAttribDRMFormatModifiers: {
            if (a->value.type != VAGenericValueTypePointer || !a->value.value.p)
                return VA_STATUS_ERROR_INVALID_PARAMETER;
            const VADRMFormatModifierList *ml = a->value.value.p;
            if (ml->num_modifiers < 1 || !ml->modifiers)
                return VA_STATUS_ERROR_INVALID_PARAMETER;
            modifier = ml->modifiers[0]; /* the fake lays memory out linearly whatever the modifier says */
            break;
        }
        case VASurfaceAttribUsageHint:
            break;
        default:
            return VA_STATUS_ERROR_ATTR_NOT_SUPPORTED;
        }
    }
    if (!fourcc) {
        if (format == VA_RT_FORMAT_YUV420) fourcc = VA_FOURCC_NV12;
        else if (format == VA_RT_FORMAT_YUV420_10) fourcc = VA_FOURCC_P010;
        else if (format == VA_RT_FORMAT_RGB32) fourcc = VA_FOURCC_BGRX;
        else return VA_STATUS_ERROR_UNSUPPORTED_RT_FORMAT;
    }
    const fake_format *f = find_format(fourcc);
    if (!f)
        return VA_STATUS_ERROR_INVALID_IMAGE_FORMAT;
    if (f->rt_format != format)
        return VA_STATUS_ERROR_UNSUPPORTED_RT_FORMAT;
    if (width == 0 || height == 0 || width > 16384 || height > 16384)
        return VA_STATUS_ERROR_RESOLUTION_NOT_SUPPORTED;
    if (mem_type != VA_SURFACE_ATTRIB_MEM_TYPE_VA && mem_type != VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME &&
        mem_type != VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2)
        return VA_STATUS_ERROR_UNSUPPORTED_MEMORY_TYPE;
    if (mem_type != VA_SURFACE_ATTRIB_MEM_TYPE_VA && !desc)
        return VA_STATUS_ERROR_INVALID_PARAMETER;
    if (mem_type == VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2 && num != 1)
        return VA_STATUS_ERROR_INVALID_PARAMETER;
    /* behave like an older driver that only imports legacy DRM PRIME buffers (tests of the fallback) */
    if (mem_type == VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2 && getenv("INTEROPFAKE_VA_NO_PRIME2_IMPORT"))
        return VA_STATUS_ERROR_UNSUPPORTED_MEMORY_TYPE;

    pthread_mutex_lock(&lock);
    unsigned made = 0;
    VAStatus st = VA_STATUS_SUCCESS;
    for (unsigned n = 0; n < num && st == VA_STATUS_SUCCESS; n++) {
        unsigned slot = 0;
        while (slot < MAX_SURFACES && surfaces[slot].used)
            slot++;
        if (slot == MAX_SURFACES) {
            st = VA_STATUS_ERROR_ALLOCATION_FAILED;
            break;
        }
        fake_surface *s = &surfaces[slot];
        memset(s, 0, sizeof(*s));
        s->used = 1;
        s->ctx = ctx;
        s->fourcc = fourcc;
        s->width = width;
        s->height = height;
        if (mem_type == VA_SURFACE_ATTRIB_MEM_TYPE_VA)
            st = alloc_native(s, f, modifier);
        else if (mem_type == VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2)
            st = import_prime2(s, desc, f);
        else
            st = import_extbuf(s, desc, f, n);
        if (st != VA_STATUS_SUCCESS) {
            free_surface(s);
            break;
        }
        out[made++] = SURFACE_BASE + slot;
    }
    if (st != VA_STATUS_SUCCESS)
        for (unsigned i = 0; i < made; i++)
            free_surface(&surfaces[out[i] - SURFACE_BASE]);
    pthread_mutex_unlock(&lock);
    return st;
}

static VAStatus fake_CreateSurfaces(VADriverContextP ctx, int width, int height, int format, int num, VASurfaceID *out)
{
    return fake_CreateSurfaces2(ctx, (unsigned)format, (unsigned)width, (unsigned)height, out, (unsigned)num, NULL, 0);
}

static VAStatus fake_DestroySurfaces(VADriverContextP ctx, VASurfaceID *list, int num)
{
    VAStatus st = VA_STATUS_SUCCESS;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < num; i++) {
        fake_surface *s = get_surface(ctx, list[i]);
        if (!s)
            st = VA_STATUS_ERROR_INVALID_SURFACE;
        else if (s->images)
            st = VA_STATUS_ERROR_SURFACE_BUSY; /* a derived image still maps it: destroy the image first */
        else
            free_surface(s);
    }
    pthread_mutex_unlock(&lock);
    return st;
}

static VAStatus fake_SyncSurface(VADriverContextP ctx, VASurfaceID id)
{
    pthread_mutex_lock(&lock);
    fake_surface *s = get_surface(ctx, id);
    if (s)
        s->syncs++;
    pthread_mutex_unlock(&lock);
    return s ? VA_STATUS_SUCCESS : VA_STATUS_ERROR_INVALID_SURFACE;
}

static VAStatus fake_QuerySurfaceStatus(VADriverContextP ctx, VASurfaceID id, VASurfaceStatus *status)
{
    pthread_mutex_lock(&lock);
    fake_surface *s = get_surface(ctx, id);
    pthread_mutex_unlock(&lock);
    if (!s)
        return VA_STATUS_ERROR_INVALID_SURFACE;
    *status = VASurfaceReady;
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_ExportSurfaceHandle(VADriverContextP ctx, VASurfaceID id, uint32_t mem_type, uint32_t flags, void *out)
{
    if (mem_type != VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2)
        return VA_STATUS_ERROR_UNSUPPORTED_MEMORY_TYPE;
    int separate = (flags & VA_EXPORT_SURFACE_SEPARATE_LAYERS) != 0, composed = (flags & VA_EXPORT_SURFACE_COMPOSED_LAYERS) != 0;
    if (separate == composed || !(flags & VA_EXPORT_SURFACE_READ_WRITE))
        return VA_STATUS_ERROR_INVALID_PARAMETER;
    VADRMPRIMESurfaceDescriptor *d = out;
    pthread_mutex_lock(&lock);
    fake_surface *s = get_surface(ctx, id);
    if (!s) {
        pthread_mutex_unlock(&lock);
        return VA_STATUS_ERROR_INVALID_SURFACE;
    }
    const fake_format *f = find_format(s->fourcc);
    memset(d, 0, sizeof(*d));
    d->fourcc = s->fourcc;
    d->width = s->width;
    d->height = s->height;
    d->num_objects = s->num_objects;
    for (uint32_t i = 0; i < s->num_objects; i++) {
        d->objects[i].fd = fcntl(s->obj[i].fd, F_DUPFD_CLOEXEC, 0); /* a new fd each call; the caller owns it */
        d->objects[i].size = s->obj[i].size;
        d->objects[i].drm_format_modifier = s->obj[i].modifier;
    }
    if (composed) {
        d->num_layers = 1;
        d->layers[0].drm_format = f->drm_format;
        d->layers[0].num_planes = s->num_planes;
        for (uint32_t p = 0; p < s->num_planes; p++) {
            d->layers[0].object_index[p] = s->plane[p].object;
            d->layers[0].offset[p] = s->plane[p].offset;
            d->layers[0].pitch[p] = s->plane[p].pitch;
        }
    } else {
        d->num_layers = s->num_planes;
        for (uint32_t p = 0; p < s->num_planes; p++) {
            d->layers[p].drm_format = f->separate_drm[p];
            d->layers[p].num_planes = 1;
            d->layers[p].object_index[0] = s->plane[p].object;
            d->layers[p].offset[0] = s->plane[p].offset;
            d->layers[p].pitch[0] = s->plane[p].pitch;
        }
    }
    s->exports++;
    s->export_flags = flags;
    pthread_mutex_unlock(&lock);
    return VA_STATUS_SUCCESS;
}

/* ---- images and buffers ------------------------------------------------------------------------------------ */

static void fill_image_format(VAImageFormat *fmt, const fake_format *f)
{
    memset(fmt, 0, sizeof(*fmt));
    fmt->fourcc = f->fourcc;
    fmt->byte_order = VA_LSB_FIRST;
    fmt->bits_per_pixel = f->bpp;
    fmt->depth = f->rt_format == VA_RT_FORMAT_RGB32 ? 24 : (f->fourcc == VA_FOURCC_P010 ? 10 : 8);
}

static VAStatus fake_DeriveImage(VADriverContextP ctx, VASurfaceID id, VAImage *image)
{
    pthread_mutex_lock(&lock);
    fake_surface *s = get_surface(ctx, id);
    VAStatus st = VA_STATUS_SUCCESS;
    if (!s)
        st = VA_STATUS_ERROR_INVALID_SURFACE;
    else if (s->num_objects != 1 || s->num_planes > 3)
        st = VA_STATUS_ERROR_OPERATION_FAILED; /* an image is one buffer: planes in several objects cannot be derived */
    unsigned islot = 0, bslot = 0;
    while (st == VA_STATUS_SUCCESS && islot < MAX_IMAGES && images[islot].used)
        islot++;
    while (st == VA_STATUS_SUCCESS && bslot < MAX_BUFFERS && buffers[bslot].used)
        bslot++;
    if (st == VA_STATUS_SUCCESS && (islot == MAX_IMAGES || bslot == MAX_BUFFERS))
        st = VA_STATUS_ERROR_ALLOCATION_FAILED;
    if (st != VA_STATUS_SUCCESS) {
        pthread_mutex_unlock(&lock);
        return st;
    }
    fake_buffer *b = &buffers[bslot];
    memset(b, 0, sizeof(*b));
    b->used = 1;
    b->ctx = ctx;
    b->type = VAImageBufferType;
    b->data = s->obj[0].map;
    b->size = s->obj[0].size;
    b->image = IMAGE_BASE + islot;
    fake_image *im = &images[islot];
    memset(im, 0, sizeof(*im));
    im->used = 1;
    im->ctx = ctx;
    im->surface = id;
    VAImage *v = &im->image;
    v->image_id = IMAGE_BASE + islot;
    fill_image_format(&v->format, find_format(s->fourcc));
    v->buf = BUFFER_BASE + bslot;
    v->width = (uint16_t)s->width;
    v->height = (uint16_t)s->height;
    v->data_size = s->obj[0].size;
    v->num_planes = s->num_planes;
    for (uint32_t p = 0; p < s->num_planes; p++) {
        v->pitches[p] = s->plane[p].pitch;
        v->offsets[p] = s->plane[p].offset;
    }
    s->images++;
    *image = *v;
    pthread_mutex_unlock(&lock);
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_DestroyImage(VADriverContextP ctx, VAImageID id)
{
    pthread_mutex_lock(&lock);
    fake_image *im = get_image(ctx, id);
    VAStatus st = VA_STATUS_SUCCESS;
    if (!im) {
        st = VA_STATUS_ERROR_INVALID_IMAGE;
    } else {
        fake_buffer *b = get_buffer(ctx, im->image.buf);
        if (b && b->maps) {
            st = VA_STATUS_ERROR_SURFACE_BUSY; /* still mapped: vaUnmapBuffer first */
        } else {
            fake_surface *s = get_surface(ctx, im->surface);
            if (s)
                s->images--;
            if (b)
                memset(b, 0, sizeof(*b));
            memset(im, 0, sizeof(*im));
        }
    }
    pthread_mutex_unlock(&lock);
    return st;
}

static VAStatus fake_CreateBuffer(VADriverContextP ctx, VAContextID c, VABufferType type, unsigned int size,
                                  unsigned int num, void *data, VABufferID *id)
{
    (void)c;
    pthread_mutex_lock(&lock);
    unsigned slot = 0;
    while (slot < MAX_BUFFERS && buffers[slot].used)
        slot++;
    VAStatus st = VA_STATUS_SUCCESS;
    uint8_t *mem = slot < MAX_BUFFERS ? calloc(1, (size_t)size * num + 1) : NULL;
    if (!mem) {
        st = VA_STATUS_ERROR_ALLOCATION_FAILED;
    } else {
        if (data)
            memcpy(mem, data, (size_t)size * num);
        fake_buffer *b = &buffers[slot];
        memset(b, 0, sizeof(*b));
        b->used = 1;
        b->ctx = ctx;
        b->type = type;
        b->data = mem;
        b->size = size * num;
        b->image = VA_INVALID_ID;
        *id = BUFFER_BASE + slot;
    }
    pthread_mutex_unlock(&lock);
    return st;
}

static VAStatus fake_MapBuffer(VADriverContextP ctx, VABufferID id, void **pbuf)
{
    pthread_mutex_lock(&lock);
    fake_buffer *b = get_buffer(ctx, id);
    if (b) {
        b->maps++;
        *pbuf = b->data;
    }
    pthread_mutex_unlock(&lock);
    return b ? VA_STATUS_SUCCESS : VA_STATUS_ERROR_INVALID_BUFFER;
}

static VAStatus fake_UnmapBuffer(VADriverContextP ctx, VABufferID id)
{
    pthread_mutex_lock(&lock);
    fake_buffer *b = get_buffer(ctx, id);
    VAStatus st = !b ? VA_STATUS_ERROR_INVALID_BUFFER : (b->maps ? VA_STATUS_SUCCESS : VA_STATUS_ERROR_OPERATION_FAILED);
    if (b && b->maps)
        b->maps--;
    pthread_mutex_unlock(&lock);
    return st;
}

static VAStatus fake_DestroyBuffer(VADriverContextP ctx, VABufferID id)
{
    pthread_mutex_lock(&lock);
    fake_buffer *b = get_buffer(ctx, id);
    VAStatus st = VA_STATUS_SUCCESS;
    if (!b)
        st = VA_STATUS_ERROR_INVALID_BUFFER;
    else if (b->type == VAImageBufferType && b->image != VA_INVALID_ID)
        st = VA_STATUS_ERROR_INVALID_BUFFER; /* an image's buffer goes with vaDestroyImage */
    else {
        free(b->data);
        memset(b, 0, sizeof(*b));
    }
    pthread_mutex_unlock(&lock);
    return st;
}

static VAStatus fake_BufferSetNumElements(VADriverContextP ctx, VABufferID id, unsigned int n)
{
    (void)ctx; (void)id; (void)n;
    return VA_STATUS_ERROR_UNIMPLEMENTED;
}

static VAStatus fake_QueryImageFormats(VADriverContextP ctx, VAImageFormat *list, int *num)
{
    (void)ctx;
    for (unsigned i = 0; i < NUM_FORMATS; i++)
        fill_image_format(&list[i], &formats[i]);
    *num = (int)NUM_FORMATS;
    return VA_STATUS_SUCCESS;
}

/* ---- config (only what vainfo-style callers need) ----------------------------------------------------------- */

static VAStatus fake_QueryConfigProfiles(VADriverContextP ctx, VAProfile *list, int *num)
{
    (void)ctx;
    list[0] = VAProfileNone;
    *num = 1;
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_QueryConfigEntrypoints(VADriverContextP ctx, VAProfile p, VAEntrypoint *list, int *num)
{
    (void)ctx;
    if (p != VAProfileNone)
        return VA_STATUS_ERROR_UNSUPPORTED_PROFILE;
    list[0] = VAEntrypointVideoProc;
    *num = 1;
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_GetConfigAttributes(VADriverContextP ctx, VAProfile p, VAEntrypoint e, VAConfigAttrib *list, int num)
{
    (void)ctx; (void)p; (void)e;
    for (int i = 0; i < num; i++)
        list[i].value = list[i].type == VAConfigAttribRTFormat ? (VA_RT_FORMAT_YUV420 | VA_RT_FORMAT_YUV420_10 | VA_RT_FORMAT_RGB32)
                                                              : VA_ATTRIB_NOT_SUPPORTED;
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_QuerySurfaceAttributes(VADriverContextP ctx, VAConfigID cfg, VASurfaceAttrib *list, unsigned int *num)
{
    (void)ctx; (void)cfg;
    unsigned n = NUM_FORMATS + 1;
    if (!list) {
        *num = n;
        return VA_STATUS_SUCCESS;
    }
    if (*num < n) {
        *num = n;
        return VA_STATUS_ERROR_MAX_NUM_EXCEEDED;
    }
    for (unsigned i = 0; i < NUM_FORMATS; i++) {
        list[i].type = VASurfaceAttribPixelFormat;
        list[i].flags = VA_SURFACE_ATTRIB_GETTABLE | VA_SURFACE_ATTRIB_SETTABLE;
        list[i].value.type = VAGenericValueTypeInteger;
        list[i].value.value.i = (int32_t)formats[i].fourcc;
    }
    list[NUM_FORMATS].type = VASurfaceAttribMemoryType;
    list[NUM_FORMATS].flags = VA_SURFACE_ATTRIB_GETTABLE | VA_SURFACE_ATTRIB_SETTABLE;
    list[NUM_FORMATS].value.type = VAGenericValueTypeInteger;
    list[NUM_FORMATS].value.value.i = VA_SURFACE_ATTRIB_MEM_TYPE_VA | VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME |
                                      VA_SURFACE_ATTRIB_MEM_TYPE_DRM_PRIME_2;
    *num = n;
    return VA_STATUS_SUCCESS;
}

static VAStatus fake_Terminate(VADriverContextP ctx)
{
    /* everything the display made goes with it, as in real drivers */
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < MAX_BUFFERS; i++)
        if (buffers[i].used && buffers[i].ctx == ctx) {
            if (buffers[i].type != VAImageBufferType)
                free(buffers[i].data);
            memset(&buffers[i], 0, sizeof(buffers[i]));
        }
    for (unsigned i = 0; i < MAX_IMAGES; i++)
        if (images[i].used && images[i].ctx == ctx)
            memset(&images[i], 0, sizeof(images[i]));
    for (unsigned i = 0; i < MAX_SURFACES; i++)
        if (surfaces[i].used && surfaces[i].ctx == ctx)
            free_surface(&surfaces[i]);
    pthread_mutex_unlock(&lock);
    return VA_STATUS_SUCCESS;
}

/* Everything else libva insists on (CHECK_VTABLE) answers "unimplemented". */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define STUB(name, ...) static VAStatus fake_##name(VADriverContextP ctx, __VA_ARGS__) { (void)ctx; return VA_STATUS_ERROR_UNIMPLEMENTED; }
STUB(CreateConfig, VAProfile p, VAEntrypoint e, VAConfigAttrib *a, int n, VAConfigID *id)
STUB(DestroyConfig, VAConfigID id)
STUB(QueryConfigAttributes, VAConfigID id, VAProfile *p, VAEntrypoint *e, VAConfigAttrib *a, int *n)
STUB(CreateContext, VAConfigID c, int w, int h, int f, VASurfaceID *r, int n, VAContextID *id)
STUB(DestroyContext, VAContextID id)
STUB(BeginPicture, VAContextID c, VASurfaceID s)
STUB(RenderPicture, VAContextID c, VABufferID *b, int n)
STUB(EndPicture, VAContextID c)
STUB(PutSurface, VASurfaceID s, void *d, short a, short b, unsigned short c, unsigned short e, short f, short g,
     unsigned short h, unsigned short i, VARectangle *r, unsigned int n, unsigned int fl)
STUB(CreateImage, VAImageFormat *f, int w, int h, VAImage *im)
STUB(SetImagePalette, VAImageID im, unsigned char *p)
STUB(GetImage, VASurfaceID s, int x, int y, unsigned int w, unsigned int h, VAImageID im)
STUB(PutImage, VASurfaceID s, VAImageID im, int a, int b, unsigned int c, unsigned int d, int e, int f, unsigned int g, unsigned int h)
STUB(QuerySubpictureFormats, VAImageFormat *f, unsigned int *fl, unsigned int *n)
STUB(CreateSubpicture, VAImageID im, VASubpictureID *sp)
STUB(DestroySubpicture, VASubpictureID sp)
STUB(SetSubpictureImage, VASubpictureID sp, VAImageID im)
STUB(SetSubpictureChromakey, VASubpictureID sp, unsigned int a, unsigned int b, unsigned int c)
STUB(SetSubpictureGlobalAlpha, VASubpictureID sp, float a)
STUB(AssociateSubpicture, VASubpictureID sp, VASurfaceID *t, int n, short a, short b, unsigned short c, unsigned short d,
     short e, short f, unsigned short g, unsigned short h, unsigned int fl)
STUB(DeassociateSubpicture, VASubpictureID sp, VASurfaceID *t, int n)
STUB(QueryDisplayAttributes, VADisplayAttribute *a, int *n)
STUB(GetDisplayAttributes, VADisplayAttribute *a, int n)
STUB(SetDisplayAttributes, VADisplayAttribute *a, int n)
STUB(BufferInfo, VABufferID b, VABufferType *t, unsigned int *s, unsigned int *n)
STUB(LockSurface, VASurfaceID s, unsigned int *a, unsigned int *b, unsigned int *c, unsigned int *d, unsigned int *e,
     unsigned int *f, unsigned int *g, unsigned int *h, void **p)
STUB(UnlockSurface, VASurfaceID s)
STUB(QuerySurfaceError, VASurfaceID s, VAStatus e, void **info)
#pragma GCC diagnostic pop

VAStatus __vaDriverInit_1_17(VADriverContextP ctx);

VAStatus __vaDriverInit_1_17(VADriverContextP ctx)
{
    struct VADriverVTable *vt = ctx->vtable;
    ctx->version_major = VA_MAJOR_VERSION;
    ctx->version_minor = VA_MINOR_VERSION;
    ctx->max_profiles = 1;
    ctx->max_entrypoints = 1;
    ctx->max_attributes = 1;
    ctx->max_image_formats = (int)NUM_FORMATS;
    ctx->max_subpic_formats = 1;
    ctx->max_display_attributes = 1;
    ctx->str_vendor = "interop conformance fake VA driver (memfd surfaces)";
    ctx->pDriverData = NULL;
#define SET(name) vt->va##name = fake_##name
    SET(Terminate); SET(QueryConfigProfiles); SET(QueryConfigEntrypoints); SET(GetConfigAttributes);
    SET(CreateConfig); SET(DestroyConfig); SET(QueryConfigAttributes); SET(CreateSurfaces); SET(CreateSurfaces2);
    SET(DestroySurfaces); SET(CreateContext); SET(DestroyContext); SET(CreateBuffer); SET(BufferSetNumElements);
    SET(MapBuffer); SET(UnmapBuffer); SET(DestroyBuffer); SET(BeginPicture); SET(RenderPicture); SET(EndPicture);
    SET(SyncSurface); SET(QuerySurfaceStatus); SET(QuerySurfaceError); SET(PutSurface); SET(QueryImageFormats);
    SET(CreateImage); SET(DeriveImage); SET(DestroyImage); SET(SetImagePalette); SET(GetImage); SET(PutImage);
    SET(QuerySubpictureFormats); SET(CreateSubpicture); SET(DestroySubpicture); SET(SetSubpictureImage);
    SET(SetSubpictureChromakey); SET(SetSubpictureGlobalAlpha); SET(AssociateSubpicture); SET(DeassociateSubpicture);
    SET(QueryDisplayAttributes); SET(GetDisplayAttributes); SET(SetDisplayAttributes); SET(BufferInfo);
    SET(LockSurface); SET(UnlockSurface); SET(QuerySurfaceAttributes); SET(ExportSurfaceHandle);
#undef SET
    return VA_STATUS_SUCCESS;
}

/* ---- test hooks (not part of any VA API): tests call these through ctypes on the same loaded library ---------- */

typedef struct {
    uint32_t fourcc, width, height, mem_type, num_objects, num_planes;
    uint32_t syncs, exports, export_flags, images;
    uint64_t modifier[4];
    uint32_t object_size[4];
    uint32_t offset[4], pitch[4], plane_object[4];
} fakeva_surface_info;

int fakeva_surface_info_get(VASurfaceID id, fakeva_surface_info *out);
int fakeva_surface_info_get(VASurfaceID id, fakeva_surface_info *out)
{
    if (id < SURFACE_BASE || id >= SURFACE_BASE + MAX_SURFACES)
        return -1;
    pthread_mutex_lock(&lock);
    fake_surface *s = &surfaces[id - SURFACE_BASE];
    int ok = s->used;
    if (ok) {
        memset(out, 0, sizeof(*out));
        out->fourcc = s->fourcc; out->width = s->width; out->height = s->height; out->mem_type = s->mem_type;
        out->num_objects = s->num_objects; out->num_planes = s->num_planes; out->syncs = s->syncs;
        out->exports = s->exports; out->export_flags = s->export_flags; out->images = (uint32_t)s->images;
        for (uint32_t i = 0; i < s->num_objects; i++) {
            out->modifier[i] = s->obj[i].modifier;
            out->object_size[i] = s->obj[i].size;
        }
        for (uint32_t p = 0; p < s->num_planes; p++) {
            out->offset[p] = s->plane[p].offset;
            out->pitch[p] = s->plane[p].pitch;
            out->plane_object[p] = s->plane[p].object;
        }
    }
    pthread_mutex_unlock(&lock);
    return ok ? 0 : -1;
}

/* Address of a plane's first byte in this process (the fake's own mapping), so a test can write or read the
 * surface behind the back of the code under test. */
void *fakeva_plane_address(VASurfaceID id, unsigned plane);
void *fakeva_plane_address(VASurfaceID id, unsigned plane)
{
    if (id < SURFACE_BASE || id >= SURFACE_BASE + MAX_SURFACES)
        return NULL;
    pthread_mutex_lock(&lock);
    fake_surface *s = &surfaces[id - SURFACE_BASE];
    void *p = s->used && plane < s->num_planes ? s->obj[s->plane[plane].object].map + s->plane[plane].offset : NULL;
    pthread_mutex_unlock(&lock);
    return p;
}

int fakeva_live(int *surfaces_out, int *images_out, int *buffers_out);
int fakeva_live(int *surfaces_out, int *images_out, int *buffers_out)
{
    int s = 0, i = 0, b = 0;
    pthread_mutex_lock(&lock);
    for (unsigned k = 0; k < MAX_SURFACES; k++) s += surfaces[k].used;
    for (unsigned k = 0; k < MAX_IMAGES; k++) i += images[k].used;
    for (unsigned k = 0; k < MAX_BUFFERS; k++) b += buffers[k].used;
    pthread_mutex_unlock(&lock);
    *surfaces_out = s; *images_out = i; *buffers_out = b;
    return 0;
}
