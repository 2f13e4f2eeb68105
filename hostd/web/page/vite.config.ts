import { defineConfig } from "vite";

// The build goes into the Python package (hostd/web/static, package data, not in git):
// `hostd web` serves it. JSX is Preact's (tsconfig: jsxImportSource).
export default defineConfig({
  base: "./",
  build: {
    outDir: "../static",
    emptyOutDir: true,
    sourcemap: false,
    chunkSizeWarningLimit: 600,
  },
});
