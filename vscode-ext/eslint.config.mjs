// Lint the TypeScript sources and tests; type-aware rules catch floating promises.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["out/**", "node_modules/**", "*.vsix"] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
      eqeqeq: ["error", "smart"],
      // Plain modules must stay testable in bare node: no vscode import outside the glue.
      "no-restricted-imports": ["error", { paths: [{ name: "vscode", message: "vscode may only be imported by the glue modules (extension.ts, view.ts, commands.ts, breakpointCommands.ts, pauseCommands.ts)." }] }],
    },
  },
  {
    // node:test's test() returns a promise the runner itself awaits.
    files: ["test/**/*.ts"],
    rules: {
      "@typescript-eslint/no-floating-promises": ["error", { allowForKnownSafeCalls: [{ from: "package", package: "node:test", name: ["test", "describe", "it"] }] }],
    },
  },
  {
    files: ["src/extension.ts", "src/view.ts", "src/commands.ts", "src/breakpointCommands.ts", "src/pauseCommands.ts"],
    rules: { "no-restricted-imports": "off" },
  },
);
