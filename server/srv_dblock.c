#include "srv_dblock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"

static int lock_whole(int fd, int cmd, struct flock *fl)
{
    memset(fl, 0, sizeof(*fl));
    fl->l_type = F_WRLCK;
    fl->l_whence = SEEK_SET; /* l_start = l_len = 0: the whole file, whatever its size */
    return fcntl(fd, cmd, fl);
}

/* The pid in the message comes from the kernel (F_GETLK), not from the file: the file's
 * text is only for people looking at the folder. */
static int refuse(int fd, const char *db_path, struct err *e)
{
    struct flock fl;
    long pid = lock_whole(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK ? (long)fl.l_pid : 0;
    close(fd);
    if (pid > 0)
        return err_set(e, ERR_BUSY,
                       "job store '%s' is in use by another latentd (pid %ld); stop it, or "
                       "give this one its own --database-url or --base-directory",
                       db_path, pid);
    return err_set(e, ERR_BUSY, "job store '%s' is in use by another latentd", db_path);
}

int srv_dblock_take(const char *db_path, int *fd_out, struct err *e)
{
    *fd_out = -1;
    if (!*db_path || strcmp(db_path, ":memory:") == 0)
        return 0;
    struct buf path;
    buf_init(&path);
    buf_printf(&path, "%s.lock", db_path);
    int fd = open(path.ptr, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        int er = errno;
        err_set(e, ERR_IO, "cannot open lock file '%s': %s", path.ptr, strerror(er));
        buf_release(&path);
        return ERR_IO;
    }
    buf_release(&path);
    struct flock fl;
    if (lock_whole(fd, F_SETLK, &fl) < 0) {
        if (errno == EACCES || errno == EAGAIN)
            return refuse(fd, db_path, e);
        int er = errno;
        close(fd);
        return err_set(e, ERR_IO, "cannot lock job store '%s': %s", db_path, strerror(er));
    }
    char text[32];
    int n = snprintf(text, sizeof(text), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) == 0) { /* for people looking at the folder; not read back */
        ssize_t w = pwrite(fd, text, (size_t)n, 0);
        (void)w;
    }
    *fd_out = fd;
    return 0;
}

void srv_dblock_release(int fd)
{
    if (fd >= 0)
        close(fd);
}
