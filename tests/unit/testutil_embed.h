/* Encoder (and decoder-embedder) fixtures end to end on a device against the CPU backend. */
#ifndef OB_TESTUTIL_EMBED_H
#define OB_TESTUTIL_EMBED_H
#include "onebit.h"
#include <jansson.h>
/* All of a fixture's sequences (arrays of token ids) in one batch: sequence i = seqs[i],
 * positions from 0. */
ob_status ob_test_decode_seqs(ob_context *c, json_t *seqs, char *err, size_t err_len);
/* dname: the backend's name as ob_model_get_info reports it ("cuda", "vulkan");
 * refused: NULL-terminated fixture names the device must refuse at placement (or NULL). */
void ob_test_encoders_on(ob_device_kind dev, const char *dname, const char *const *refused);
#endif
