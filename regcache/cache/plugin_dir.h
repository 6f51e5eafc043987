/* Where the backend plugins lie: the directory of libnicmalloc.so's real file. The loader names
 * the library by the path it took to it, which may be relative (a relative LD_LIBRARY_PATH or
 * LD_PRELOAD, dlopen("./libnicmalloc.so")) and so wrong once the program changes its directory,
 * or a symbolic link in a directory without the plugins. The path is resolved once, from the
 * library's constructor (alloc/api/init.c), while the directory is still the one the loader
 * started from, and kept. */
#ifndef NIC_PLUGIN_DIR_H
#define NIC_PLUGIN_DIR_H

/* From the library's constructor. Resolving may allocate (realpath, for a long path). */
void nic_plugin_dir_find(void);

/* The directory with its final '/', or "" when the loader names no file for the library (the
 * plugins are then looked for along the library path alone). Found now if the constructor has
 * not run yet; any thread. */
const char *nic_plugin_dir(void);

#endif
