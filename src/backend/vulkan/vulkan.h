/* Vulkan backend: public extras beyond the backend seam (ob_backend_vulkan_new is declared
 * in backend/backend.h). */
#ifndef OB_BACKEND_VULKAN_VULKAN_H
#define OB_BACKEND_VULKAN_VULKAN_H

#include <stdio.h>
#include "core/env.h"

/* Prints one line per Vulkan device: the index `--device vulkan:N` takes (or '-' when it
 * cannot run onebit, with the reason), name, kind, device memory, subgroup size and
 * whether it has VK_KHR_cooperative_matrix. Says so in one line when there is no loader
 * or no device. Indices order GPUs by memory, largest first. */
void ob_vulkan_list_devices(FILE *f);

/* The Vulkan backend's switches (vk_env.c), for `1bit info --env`; n: their number. */
const ob_env_var *ob_vulkan_env(size_t *n);

#endif
