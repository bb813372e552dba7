#include "afile.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "buf.h"

static atomic_uint seq; /* two threads writing the same name get two temporaries */

int afile_open(struct afile *af, const char *path, struct err *e)
{
    memset(af, 0, sizeof(*af));
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path + 1) : 0;
    struct buf tmp;
    buf_init(&tmp);
    buf_printf(&tmp, "%.*s.%s.tmp-%d-%u", (int)dir_len, path, path + dir_len, (int)getpid(),
               atomic_fetch_add(&seq, 1));
    af->fp = fopen(tmp.ptr, "wbx");
    if (!af->fp) {
        int er = errno;
        buf_release(&tmp);
        err_set(e, ERR_IO, "cannot create '%s': %s", path, strerror(er));
        errno = er;
        return ERR_IO;
    }
    af->_tmp = buf_detach(&tmp, NULL);
    af->_path = xstrdup(path);
    return 0;
}

static void afile_release(struct afile *af)
{
    xfree(af->_tmp);
    xfree(af->_path);
    memset(af, 0, sizeof(*af));
}

int afile_commit(struct afile *af, struct err *e)
{
    int er = 0;
    if (fflush(af->fp) != 0 || ferror(af->fp))
        er = errno ? errno : EIO;
    if (fclose(af->fp) != 0 && !er)
        er = errno;
    af->fp = NULL;
    if (!er && rename(af->_tmp, af->_path) != 0)
        er = errno;
    if (er) {
        unlink(af->_tmp);
        err_set(e, ERR_IO, "cannot write '%s': %s", af->_path, strerror(er));
    }
    afile_release(af);
    errno = er; /* callers that word their own message (without the path) read it */
    return er ? ERR_IO : 0;
}

void afile_abort(struct afile *af)
{
    if (af->fp)
        fclose(af->fp);
    if (af->_tmp)
        unlink(af->_tmp);
    afile_release(af);
}

int afile_write(const char *path, const void *data, size_t n, struct err *e)
{
    struct afile af;
    int rc = afile_open(&af, path, e);
    if (rc < 0)
        return rc;
    if (n && fwrite(data, 1, n, af.fp) != n) {
        int er = errno ? errno : EIO;
        afile_abort(&af);
        errno = er;
        return err_set(e, ERR_IO, "cannot write '%s': %s", path, strerror(er));
    }
    return afile_commit(&af, e);
}
