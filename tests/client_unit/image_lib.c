/* A library file holding a 2 MiB "image" in its read-only data (test_image_hash.c). */
const unsigned char rgpu_test_image[2u << 20] = {0x7f, 'E', 'L', 'F', 1, 2, 3, 4, 5, 6, 7, 8};
