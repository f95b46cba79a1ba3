/* PyTorch checkpoints (pytorch_model.bin): a zip holding data.pkl and one file per storage.
 * Not implemented yet: refused with a clear message. */
#include "convert/convert.h"

ob_status ob_pt_load(ob_src_set *s, const char *path, char *err, size_t err_len) {
    (void)s;
    return ob_fail(err, err_len, OB_ERR_UNSUPPORTED, "%s: pytorch_model.bin is not supported yet; convert it to safetensors", path);
}
