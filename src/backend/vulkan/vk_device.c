/* Vulkan instance, device choice and listing, and buffers (allocation, host copies). */
#include "backend/vulkan/vk_internal.h"
#include <stdio.h>
#include <stdlib.h>

#define OB_VK_MAX_DEVICES 16
#define OB_VK_STAGING_SIZE ((size_t)32 << 20)

ob_status ob_vk_instance_new(VkInstance *out, char *err, size_t err_len) {
    *out = VK_NULL_HANDLE;
    uint32_t ver = 0;
    /* vkEnumerateInstanceVersion is 1.1+; a 1.0 loader cannot run our shaders anyway. */
    if (vkEnumerateInstanceVersion(&ver) != VK_SUCCESS || ver < VK_API_VERSION_1_2)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: the Vulkan loader is older than 1.2");
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "onebit",
                             .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkResult r = vkCreateInstance(&ci, NULL, out);
    if (r != VK_SUCCESS)
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: no Vulkan driver (vkCreateInstance: %d)", (int)r);
    return OB_OK;
}

static bool has_extension(VkPhysicalDevice p, const char *name) {
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(p, NULL, &n, NULL) != VK_SUCCESS || !n) return false;
    VkExtensionProperties *e = malloc(sizeof(*e) * n);
    if (!e) return false;
    bool found = false;
    if (vkEnumerateDeviceExtensionProperties(p, NULL, &n, e) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(e[i].extensionName, name);
    free(e);
    return found;
}

static void describe(VkPhysicalDevice p, ob_vk_dev_info *d, bool allow_cpu) {
    memset(d, 0, sizeof(*d));
    d->phys = p;
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 pr = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    vkGetPhysicalDeviceProperties2(p, &pr);
    snprintf(d->name, sizeof(d->name), "%s", pr.properties.deviceName);
    d->type = pr.properties.deviceType;
    d->api = pr.properties.apiVersion;
    d->subgroup = sg.subgroupSize;
    d->shared_bytes = pr.properties.limits.maxComputeSharedMemorySize;
    d->max_wg = pr.properties.limits.maxComputeWorkGroupInvocations;
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(p, &mp);
    for (uint32_t i = 0; i < mp.memoryHeapCount; i++)
        if ((mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && mp.memoryHeaps[i].size > d->mem)
            d->mem = mp.memoryHeaps[i].size;
    d->coopmat = has_extension(p, "VK_KHR_cooperative_matrix");
    if (d->api < VK_API_VERSION_1_2) { d->unusable = "Vulkan 1.2 needed"; return; }
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &f11};
    VkPhysicalDeviceShaderIntegerDotProductFeatures fid = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    const bool idp = has_extension(p, "VK_KHR_shader_integer_dot_product");
    if (idp) f11.pNext = &fid;
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    vkGetPhysicalDeviceFeatures2(p, &f);
    d->int_dot = idp && fid.shaderIntegerDotProduct;
    d->float64 = f.features.shaderFloat64;
    d->shuffle = (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) && d->subgroup >= 8 && d->subgroup % 8 == 0;
    if (!f12.bufferDeviceAddress) d->unusable = "no bufferDeviceAddress";
    else if (!f.features.shaderInt64) d->unusable = "no shaderInt64";
    else if (!f12.storageBuffer8BitAccess || !f11.storageBuffer16BitAccess) d->unusable = "no 8/16-bit storage";
    else if (!(sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) ||
             (sg.supportedOperations & (VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT)) !=
                 (VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) ||
             sg.subgroupSize < 2)
        d->unusable = "no subgroup arithmetic in compute";
    else if (d->type == VK_PHYSICAL_DEVICE_TYPE_CPU) {
        /* A software rasterizer is slower than our CPU backend: only for tests. */
        if (!allow_cpu) d->unusable = "software device (ONEBIT_VULKAN_ALLOW_CPU=1 to use)";
    }
}

static int rank(const ob_vk_dev_info *d) {
    if (d->unusable) return 3;
    if (d->type == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU || d->type == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU) return 0;
    return d->type == VK_PHYSICAL_DEVICE_TYPE_CPU ? 2 : 1;
}

static int cmp_dev(const void *pa, const void *pb) {
    const ob_vk_dev_info *a = pa, *b = pb;
    int ra = rank(a), rb = rank(b);
    if (ra != rb) return ra - rb;
    return a->mem > b->mem ? -1 : a->mem < b->mem ? 1 : 0;
}

int ob_vk_enum_devices(VkInstance inst, ob_vk_dev_info *out, int cap, int *n_usable, bool allow_cpu) {
    *n_usable = 0;
    VkPhysicalDevice phys[OB_VK_MAX_DEVICES];
    uint32_t n = OB_VK_MAX_DEVICES;
    VkResult r = vkEnumeratePhysicalDevices(inst, &n, phys);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) return 0;
    int k = 0;
    for (uint32_t i = 0; i < n && k < cap; i++) describe(phys[i], &out[k++], allow_cpu);
    qsort(out, (size_t)k, sizeof(*out), cmp_dev);
    for (int i = 0; i < k; i++) *n_usable += out[i].unusable == NULL;
    return k;
}

static const char *type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

void ob_vulkan_list_devices(FILE *f) {
    char err[256];
    VkInstance inst;
    if (ob_vk_instance_new(&inst, err, sizeof(err)) != OB_OK) {
        fprintf(f, "vulkan: %s\n", err);
        return;
    }
    ob_vk_opts o;
    ob_vk_env_parse(&o);
    ob_vk_dev_info d[OB_VK_MAX_DEVICES];
    int nu, n = ob_vk_enum_devices(inst, d, OB_VK_MAX_DEVICES, &nu, o.allow_cpu);
    if (n == 0) fprintf(f, "vulkan: no devices\n");
    for (int i = 0; i < n; i++) {
        char idx[16];
        snprintf(idx, sizeof(idx), "%d", i);
        fprintf(f, "vulkan:%s  %s (%s)  %.1f GiB  subgroup %u  coopmat %s  Vulkan %u.%u%s%s\n",
                d[i].unusable ? "-" : idx, d[i].name, type_name(d[i].type), d[i].mem / 1073741824.0,
                d[i].subgroup, d[i].coopmat ? "khr" : "no", VK_API_VERSION_MAJOR(d[i].api),
                VK_API_VERSION_MINOR(d[i].api), d[i].unusable ? "  unusable: " : "",
                d[i].unusable ? d[i].unusable : "");
    }
    vkDestroyInstance(inst, NULL);
}

/* ---- device ---------------------------------------------------------------------------- */

/* Device-local memory on the largest device-local heap; mappable if such a type exists
 * there (integrated GPUs, resizable BAR, lavapipe), else plain device-local plus staging. */
static bool pick_memory(ob_vk *vk, VkPhysicalDeviceMemoryProperties *mp) {
    const bool no_map = vk->opt.staging; /* tests the staging path on mappable devices */
    int heap = -1;
    for (uint32_t i = 0; i < mp->memoryHeapCount; i++)
        if ((mp->memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            (heap < 0 || mp->memoryHeaps[i].size > mp->memoryHeaps[heap].size))
            heap = (int)i;
    int best = -1;
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
        VkMemoryPropertyFlags fl = mp->memoryTypes[i].propertyFlags;
        if ((int)mp->memoryTypes[i].heapIndex != heap || !(fl & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) continue;
        bool mappable = (fl & hv) == hv && !no_map;
        /* among mappable types, one the CPU also reads through its caches is better */
        bool better = mappable && (!vk->host_visible || ((fl & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) &&
                                                         !(mp->memoryTypes[best].propertyFlags & VK_MEMORY_PROPERTY_HOST_CACHED_BIT)));
        if (best < 0 || better) {
            best = (int)i;
            vk->host_visible = mappable;
        }
    }
    if (best < 0) return false;
    vk->mem_type = (uint32_t)best;
    /* Reading logits through an uncached BAR mapping cost tens of ms a step; a GPU copy
     * into cached host memory takes microseconds (bench/NOTES-vulkan-3-11.md: Staged reads
     * measured). */
    vk->staged_reads = vk->host_visible && (!(mp->memoryTypes[best].propertyFlags & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) ||
                                            vk->opt.staged_reads);
    return true;
}

ob_status ob_vk_device_init(ob_vk *vk, int index, char *err, size_t err_len) {
    ob_vk_env_parse(&vk->opt);
    ob_status st = ob_vk_instance_new(&vk->inst, err, err_len);
    if (st) return st;
    ob_vk_dev_info d[OB_VK_MAX_DEVICES];
    int nu, n = ob_vk_enum_devices(vk->inst, d, OB_VK_MAX_DEVICES, &nu, vk->opt.allow_cpu);
    if (nu == 0) {
        if (n > 0)
            return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: no usable device (%s: %s)", d[0].name,
                           d[0].unusable);
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: no Vulkan device");
    }
    if (index < 0 || index >= nu)
        return ob_fail(err, err_len, OB_ERR_ARG, "vulkan: device %d does not exist (%d usable)", index, nu);
    vk->info = d[index];

    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(vk->info.phys, &nq, NULL);
    VkQueueFamilyProperties qf[16];
    if (nq > 16) nq = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(vk->info.phys, &nq, qf);
    int fam = -1;
    /* Prefer a compute-only family (async compute on discrete GPUs), else any with compute. */
    for (uint32_t i = 0; i < nq; i++)
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) { fam = (int)i; break; }
    for (uint32_t i = 0; i < nq && fam < 0; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) fam = (int)i;
    if (fam < 0) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: %s has no compute queue", vk->info.name);
    vk->qfam = (uint32_t)fam;
    const int pf = vk->opt.profile;
    if (pf >= 1) {
        VkPhysicalDeviceProperties pp;
        vkGetPhysicalDeviceProperties(vk->info.phys, &pp);
        uint32_t bits = qf[fam].timestampValidBits;
        /* timestampComputeAndGraphics only promises what bits != 0 already tells for our
         * family; a zero period would make every time zero. */
        if (bits == 0 || !(pp.limits.timestampPeriod > 0)) {
            ob_log(OB_LOG_WARN, "vulkan: ONEBIT_VK_PROFILE: %s has no timestamps on its compute queue; profiling off",
                   vk->info.name);
        } else {
            vk->prof.on = true;
            vk->prof.start_waits = pf == 2;
            vk->prof.timeline = pf == 3;
            vk->prof.levels = pf == 4;
            vk->prof.ns_per_tick = pp.limits.timestampPeriod;
            vk->prof.mask = bits >= 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
            ob_log(OB_LOG_INFO, "vulkan: profiling: %u-bit timestamps, %.3f ns per tick%s", bits,
                   pp.limits.timestampPeriod, pp.limits.timestampComputeAndGraphics ? "" : " (queue family only)");
        }
    }

    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = vk->qfam,
                                   .queueCount = 1, .pQueuePriorities = &prio};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .storageBuffer16BitAccess = VK_TRUE};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &f11, .bufferDeviceAddress = VK_TRUE,
                                            .storageBuffer8BitAccess = VK_TRUE};
    const ob_vk_opts *o = &vk->opt;
    vk->no_matvec = o->no_matvec;
    /* Decode knobs for measuring on a real GPU: rows per subgroup trade workgroups in
     * flight against how many rows share one staged copy of x. */
    const int rps = o->matvec_rows > 0 ? o->matvec_rows : 1;
    uint32_t sg_per_wg = vk->info.subgroup >= 128 ? 1 : 128 / vk->info.subgroup;
    vk->matvec_rows = sg_per_wg * (uint32_t)rps;
    vk->matvec_stage = o->matvec_stage;
    /* The streaming matvec (Q4_K, Q6_K, Q8_0, Q1_0, TQ2_0): rows per subgroup share each
     * load of x; 4 unless ONEBIT_VK_MATVEC_ROWS says (at most 4, the shader's RMAX): 4 beat 2
     * (bench/NOTES-vulkan-3-11.md: Decode rework and cooperative matrices). */
    const uint32_t frps = o->matvec_rows > 0 ? (uint32_t)(rps > 4 ? 4 : rps) : 4;
    vk->matvec_fast_rps = frps;
    vk->matvec_fast_rows = sg_per_wg * frps;
    /* matvec.comp's split-K path for one token: x in registers for a workgroup's rows.
     * Opt-in: it did not beat the streaming path (bench/NOTES-cuda-3-7.md: Session 7, Vulkan
     * on the same card); its partial sums need subgroups of 4..128. */
    vk->matvec_splitk = o->matvec_splitk && vk->info.subgroup >= 4 && vk->info.subgroup <= 128;
    /* Decode on int8 activations where the device has integer dot products. */
    vk->q8 = vk->info.int_dot && o->q8;
    /* x staged in shared memory: slower than read from global memory, so on request
     * (bench/NOTES-vulkan-3-11.md: Session 10, int8 activations; bench/NOTES.md: Moved from
     * source comments) */
    vk->q8_stage = o->q8_stage;
    vk->q8_fuse = vk->q8 && vk->info.shuffle && o->q8_fuse;
    vk->q8_rows = (uint32_t)o->q8_rows;
    const int q8r1 = o->q8_rows1 >= 0 ? o->q8_rows1 : 8;
    vk->q8_rows1_auto = o->q8_rows1 < 0;
    /* 8, 4, 2 or 1 (a pipeline each), 0 off */
    vk->q8_rows1 = q8r1 >= 8 ? 8 : q8r1 >= 4 ? 4 : q8r1 >= 2 ? 2 : q8r1 >= 1 ? 1 : 0;
    vk->q8_min_wg = o->q8_min_wg >= 0 ? (uint32_t)o->q8_min_wg : 256u; /* 0: never fewer */
    vk->q8_min_wg_auto = o->q8_min_wg < 0;
    vk->reuse = !o->no_reuse;
    vk->all_barriers = o->all_barriers;
    vk->hz_audit = o->hz_audit;
    vk->bar_compute = o->barrier_compute;
    vk->no_fuse = o->no_fuse;
    vk->attn_splits = (uint32_t)o->attn_split;
    vk->attn_cells = (uint32_t)o->attn_cells;
    vk->res_fuse = o->res_fuse;
    vk->prenorm = vk->q8_fuse && o->prenorm;
    vk->attn_q8 = o->attn_q8;
    vk->attn_last = o->attn_last;
    vk->attn_dec = o->attn_dec;
    vk->attn_solo = (uint32_t)o->attn_solo;
    vk->q6k_rows1 = (uint32_t)o->q6k_rows1;
    vk->repack = o->repack;
    vk->pn_glu = (uint32_t)o->pn_glu;
    vk->pn_glu16 = !strcmp(o->pn_glu16, "0") ? 0u : !strcmp(o->pn_glu16, "all") ? 2u : 1u;
    /* Polling the fence instead of sleeping in the driver's wait cuts the time from the
     * GPU's end to the host's return to a quarter (bench/NOTES.md: Session 21, the fence
     * polled). A step's wait on a GPU polls for up to
     * 20 ms (a decode step of any model here), then blocks; on a CPU device (lavapipe) the
     * poll would take a core from the device's own threads, so it blocks at once. */
    vk->spin_us = o->spin_us >= 0 ? (uint32_t)o->spin_us : vk->info.type == VK_PHYSICAL_DEVICE_TYPE_CPU ? 0u : 20000u;
    vk->attn_fold = o->attn_fold;
    ob_vk_fault_env(vk); /* the marks, the timeout, ONEBIT_TEST_FAULT */
    /* 1: a workgroup per query head beat 2 and 4: its per-invocation work, not the extra
     * key and value reads, sets the time (bench/NOTES-vulkan-12-16.md: Session 12) */
    vk->attn_gw = o->attn_gw >= 4 ? 4 : o->attn_gw >= 2 ? 2 : 1;
    VkPhysicalDeviceShaderIntegerDotProductFeatures fid = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES, .shaderIntegerDotProduct = VK_TRUE};
    const char *exts[2];
    uint32_t n_ext = 0;
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR fpe = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
        .pipelineExecutableInfo = VK_TRUE};
    vk->pipe_stats = o->pipe_stats && has_extension(vk->info.phys, "VK_KHR_pipeline_executable_properties");
    if (vk->pipe_stats) {
        exts[n_ext++] = "VK_KHR_pipeline_executable_properties";
        fpe.pNext = f11.pNext;
        f11.pNext = &fpe;
    }
    if (vk->q8) {
        exts[n_ext++] = "VK_KHR_shader_integer_dot_product";
        fid.pNext = f11.pNext;
        f11.pNext = &fid;
    }
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    f.features.shaderInt64 = VK_TRUE;
    f.features.shaderFloat64 = vk->info.float64;
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f, .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci, .enabledExtensionCount = n_ext,
                              .ppEnabledExtensionNames = exts};
    OB_VK_CHECK(vkCreateDevice(vk->info.phys, &dci, NULL, &vk->dev));
    vkGetDeviceQueue(vk->dev, vk->qfam, 0, &vk->queue);

    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(vk->info.phys, &mp);
    if (!pick_memory(vk, &mp)) return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: no device-local memory");

    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = vk->qfam};
    OB_VK_CHECK(vkCreateCommandPool(vk->dev, &pci, NULL, &vk->cpool));
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = vk->cpool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    OB_VK_CHECK(vkAllocateCommandBuffers(vk->dev, &cai, &vk->cmd));
    VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    OB_VK_CHECK(vkCreateFence(vk->dev, &fci, NULL, &vk->fence));

    VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = sizeof(ob_vk_pc)};
    VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .pushConstantRangeCount = 1, .pPushConstantRanges = &pcr};
    OB_VK_CHECK(vkCreatePipelineLayout(vk->dev, &lci, NULL, &vk->layout));
    for (int s = 0; s < OB_VK_SH_COUNT; s++) {
        /* A driver may reject SPIR-V whose capabilities it lacks, even unused. */
        /* (the attention fold, after the int8 matmuls, needs shuffles and not int8 dot
         * products: with ONEBIT_VK_Q8=0 or a device without them it had no module, and
         * its pipeline failed, VkResult -13 on lavapipe, a crash on the H200) */
        if ((((s >= OB_VK_SH_MATVEC_Q8 && s <= OB_VK_SH_MATVEC_Q8_1R1) || (s >= OB_VK_SH_MATVEC_Q8_PNP && s <= OB_VK_SH_MATVEC_Q8_PNG)) &&
             !vk->q8) ||
            ((s == OB_VK_SH_NORM_Q8 || s == OB_VK_SH_QUANT_X4) && !vk->q8_fuse) ||
            (s >= OB_VK_SH_MATVEC_Q8_PNP && s <= OB_VK_SH_MATVEC_Q8_PNG && !vk->prenorm) ||
            (s == OB_VK_SH_ATTN_FOLD && !vk->info.shuffle) ||
            ((s == OB_VK_SH_SAMPLE || s == OB_VK_SH_MOE_GATE_F64) && !vk->info.float64) ||
            (s == OB_VK_SH_FAULT && !vk->fault_node[0]))
            continue;
        const ob_vk_spv *spv = &ob_vk_spv_table[s];
        VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                        .codeSize = spv->size, .pCode = spv->code};
        OB_VK_CHECK(vkCreateShaderModule(vk->dev, &mci, NULL, &vk->mods[s]));
    }
    if (!vk->host_visible || vk->staged_reads) {
        st = ob_vk_buffer_new(vk, OB_VK_STAGING_SIZE, true, &vk->staging, err, err_len);
        if (st) return st;
    }
    st = ob_vk_fault_init(vk, err, err_len);
    if (st) return st;
    ob_log(OB_LOG_INFO, "vulkan: matmul: decode %s (%u rows per workgroup%s; int8 %s), prefill tiled f32",
           vk->no_matvec ? "tiled" : "matvec", vk->matvec_rows, vk->matvec_stage ? ", x in shared memory" : "",
           !vk->q8 ? "off" : vk->q8_fuse ? "on, fused" : "on");
    return OB_OK;
}

/* After a fault (vk_fault.c) the device may still be running the work that hung: nothing
 * of it is waited for or destroyed (destroying objects in use is undefined, and a driver
 * may wait for them); the process that saw the fault is ending. */
void ob_vk_device_free(ob_vk *vk) {
    if (vk->dev && !vk->faulted) {
        char err[512];
        if (ob_vk_wait_idle(vk, err, sizeof(err)) != OB_OK) ob_log(OB_LOG_ERROR, "%s", err);
    }
    ob_vk_fault_free(vk);
    if (vk->dev && !vk->faulted) {
        for (int i = 0; i < vk->n_allocs; i++) ob_vk_buffer_free(vk, &vk->allocs[i]);
        if (vk->staging.buf) ob_vk_buffer_free(vk, &vk->staging);
        if (vk->attn_part.buf) ob_vk_buffer_free(vk, &vk->attn_part);
        if (vk->q8_buf.buf) ob_vk_buffer_free(vk, &vk->q8_buf);
        if (vk->pn_buf.buf) ob_vk_buffer_free(vk, &vk->pn_buf);
        if (vk->q8_buf2.buf) ob_vk_buffer_free(vk, &vk->q8_buf2);
        if (vk->ss_buf.buf) ob_vk_buffer_free(vk, &vk->ss_buf);
        if (vk->fold_par.buf) ob_vk_buffer_free(vk, &vk->fold_par);
        for (int i = 0; i < vk->n_retired; i++) ob_vk_buffer_free(vk, &vk->retired[i]);
        for (int s = 0; s < OB_VK_SH_COUNT; s++) {
            for (int t = 0; t < OB_VK_PIPE_SLOTS; t++)
                if (vk->pipes[s][t]) vkDestroyPipeline(vk->dev, vk->pipes[s][t], NULL);
            if (vk->mods[s]) vkDestroyShaderModule(vk->dev, vk->mods[s], NULL);
        }
        if (vk->layout) vkDestroyPipelineLayout(vk->dev, vk->layout, NULL);
        if (vk->fence) vkDestroyFence(vk->dev, vk->fence, NULL);
        if (vk->cpool) vkDestroyCommandPool(vk->dev, vk->cpool, NULL);
        if (vk->prof.pool) vkDestroyQueryPool(vk->dev, vk->prof.pool, NULL);
        vkDestroyDevice(vk->dev, NULL);
    }
    if (vk->inst && !vk->faulted) vkDestroyInstance(vk->inst, NULL);
    free(vk->allocs);
    ob_vk_hz_audit_free(vk);
    free(vk->list);
    free(vk->prev);
    free(vk->rp);
    free(vk->prof.key);
    free(vk->prof.ts);
    free(vk->prof.tl_start);
    free(vk->prof.tl_dur);
}

bool ob_vk_prof_reserve(ob_vk *vk, int64_t n) {
    if (!vk->prof.on) return false;
    if (n < 1) n = 1;
    if (n > (1 << 20)) return false; /* a graph that large: skip this step, keep profiling */
    uint32_t want = 2 * (uint32_t)n;
    if (want <= vk->prof.cap) return true;
    /* Called outside recording: every earlier use of the pool has passed its fence. */
    if (vk->recording) return false;
    int *key = realloc(vk->prof.key, sizeof(int) * (want / 2));
    if (key) vk->prof.key = key;
    uint64_t *ts = key ? realloc(vk->prof.ts, sizeof(uint64_t) * want) : NULL;
    if (ts) vk->prof.ts = ts;
    if (!key || !ts) { vk->prof.on = false; return false; }
    if (vk->prof.pool) vkDestroyQueryPool(vk->dev, vk->prof.pool, NULL);
    vk->prof.pool = VK_NULL_HANDLE;
    vk->prof.cap = 0;
    VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                 .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = want};
    if (vkCreateQueryPool(vk->dev, &qci, NULL, &vk->prof.pool) != VK_SUCCESS) {
        ob_log(OB_LOG_WARN, "vulkan: ONEBIT_VK_PROFILE: cannot create a query pool of %u; profiling off", want);
        vk->prof.pool = VK_NULL_HANDLE;
        vk->prof.on = false;
        return false;
    }
    vk->prof.cap = want;
    return true;
}

size_t ob_vk_free_memory(ob_vk *vk) {
    if (!vk->dev || vk->faulted) return 0;
    VkPhysicalDeviceMemoryBudgetPropertiesEXT bp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    bool ext = has_extension(vk->info.phys, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
    VkPhysicalDeviceMemoryProperties2 mp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                                            .pNext = ext ? &bp : NULL};
    vkGetPhysicalDeviceMemoryProperties2(vk->info.phys, &mp);
    if (vk->mem_type >= mp.memoryProperties.memoryTypeCount) return 0;
    uint32_t heap = mp.memoryProperties.memoryTypes[vk->mem_type].heapIndex;
    if (heap >= mp.memoryProperties.memoryHeapCount) return 0;
    /* The budget counts every process on the device (and our own buffers in usage). */
    if (ext && bp.heapBudget[heap] > 0)
        return bp.heapBudget[heap] > bp.heapUsage[heap] ? (size_t)(bp.heapBudget[heap] - bp.heapUsage[heap]) : 0;
    uint64_t used = 0, size = mp.memoryProperties.memoryHeaps[heap].size;
    for (int i = 0; i < vk->n_allocs; i++) used += vk->allocs[i].size;
    return size > used ? (size_t)(size - used) : 0;
}

/* ---- buffers --------------------------------------------------------------------------- */

static int32_t find_type(ob_vk *vk, uint32_t bits, VkMemoryPropertyFlags want) {
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(vk->info.phys, &mp);
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want) return (int32_t)i;
    return -1;
}

ob_status ob_vk_buffer_new(ob_vk *vk, size_t size, bool host, ob_vk_alloc *out, char *err, size_t err_len) {
    memset(out, 0, sizeof(*out));
    size_t sz = (size + 255) & ~(size_t)255;
    if (sz < size) return ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: buffer size overflow");
    if (!sz) sz = 256;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = sz,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                       (host ? 0 : VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT),
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    OB_VK_CHECK(vkCreateBuffer(vk->dev, &bci, NULL, &out->buf));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(vk->dev, out->buf, &req);
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int32_t mt = host ? find_type(vk, req.memoryTypeBits, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT) /* fast reads */
                      : ((req.memoryTypeBits >> vk->mem_type) & 1) ? (int32_t)vk->mem_type : -1;
    if (host && mt < 0) mt = find_type(vk, req.memoryTypeBits, hv);
    if (mt < 0) {
        vkDestroyBuffer(vk->dev, out->buf, NULL);
        out->buf = VK_NULL_HANDLE;
        return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "vulkan: no memory type for a buffer");
    }
    VkMemoryAllocateFlagsInfo fl = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                    .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = host ? NULL : &fl,
                                .allocationSize = req.size, .memoryTypeIndex = (uint32_t)mt};
    VkResult r = vkAllocateMemory(vk->dev, &mai, NULL, &out->mem);
    if (r != VK_SUCCESS) {
        vkDestroyBuffer(vk->dev, out->buf, NULL);
        out->buf = VK_NULL_HANDLE;
        return ob_fail(err, err_len, OB_ERR_NOMEM, "vulkan: cannot allocate %.1f MiB of device memory (%d)",
                       sz / 1048576.0, (int)r);
    }
    OB_VK_CHECK(vkBindBufferMemory(vk->dev, out->buf, out->mem, 0));
    if (host || vk->host_visible) OB_VK_CHECK(vkMapMemory(vk->dev, out->mem, 0, VK_WHOLE_SIZE, 0, &out->map));
    if (!host) {
        VkBufferDeviceAddressInfo ai = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = out->buf};
        out->addr = vkGetBufferDeviceAddress(vk->dev, &ai);
    }
    out->size = sz;
    return OB_OK;
}

void ob_vk_buffer_free(ob_vk *vk, ob_vk_alloc *a) {
    if (a->map) vkUnmapMemory(vk->dev, a->mem);
    if (a->buf) vkDestroyBuffer(vk->dev, a->buf, NULL);
    if (a->mem) vkFreeMemory(vk->dev, a->mem, NULL);
    memset(a, 0, sizeof(*a));
}

ob_vk_alloc *ob_vk_find(ob_vk *vk, uint64_t addr, size_t size) {
    for (int i = 0; i < vk->n_allocs; i++) {
        ob_vk_alloc *a = &vk->allocs[i];
        if (addr >= a->addr && addr - a->addr <= a->size && size <= a->size - (addr - a->addr)) return a;
    }
    return NULL;
}

/* Host <-> device copy of size bytes; dev is the device side (an address from alloc). */
ob_status ob_vk_copy(ob_vk *vk, void *dst, const void *src, size_t size, bool to_device, char *err, size_t err_len) {
    if (!size) return OB_OK;
    uint64_t dev = (uint64_t)(uintptr_t)(to_device ? dst : src);
    ob_vk_alloc *a = ob_vk_find(vk, dev, size);
    if (!a) return ob_fail(err, err_len, OB_ERR_ARG, "vulkan: copy of %zu bytes outside any buffer", size);
    ob_status st = ob_vk_copy_at(vk, a, (size_t)(dev - a->addr), to_device ? (void *)src : dst, size, to_device, err, err_len);
    /* repacked weights come down as they went up */
    if (!st && !to_device && vk->n_rp) st = ob_vk_repack_download(vk, dst, dev, size, err, err_len);
    return st;
}

ob_status ob_vk_copy_at(ob_vk *vk, ob_vk_alloc *a, size_t off, void *host, size_t size, bool to_device, char *err,
                        size_t err_len) {
    if (!size) return OB_OK;
    if (vk->faulted) return ob_fail(err, err_len, OB_ERR_DEVICE, "vulkan: the device was lost");
    const void *src = host;
    void *dst = host;
    /* Mapped memory: writes stream through write-combining at bus speed; reads only where
     * the mapping is cached (or tiny), else through staging. */
    if (a->map && (to_device || !vk->staged_reads || size <= 256)) {
        if (to_device) memcpy((char *)a->map + off, src, size);
        else memcpy(dst, (const char *)a->map + off, size);
        return OB_OK;
    }
    for (size_t done = 0; done < size;) {
        size_t n = OB_MIN(size - done, vk->staging.size);
        if (to_device) memcpy(vk->staging.map, (const char *)src + done, n);
        ob_status st = ob_vk_begin(vk, err, err_len);
        if (st) return st;
        VkBufferCopy bc = {.srcOffset = to_device ? 0 : off + done, .dstOffset = to_device ? off + done : 0, .size = n};
        vkCmdCopyBuffer(vk->cmd, to_device ? vk->staging.buf : a->buf, to_device ? a->buf : vk->staging.buf, 1, &bc);
        st = ob_vk_submit_wait(vk, err, err_len);
        if (st) return st;
        if (!to_device) memcpy((char *)dst + done, vk->staging.map, n);
        done += n;
    }
    return OB_OK;
}
