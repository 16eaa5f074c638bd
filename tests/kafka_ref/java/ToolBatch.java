// Runs several of Kafka's command-line tools in one JVM (a JVM start costs about a second here):
// reads a JSON array of {"main": CLASS, "args": [...], "stdin": TEXT?} on stdin and prints, for each
// in order, one JSON line {"code": N, "out": STDOUT, "err": STDERR}. A tool's first Exit.exit(code)
// (what Kafka's tools call instead of System.exit) ends only that tool: its code is the tool's, and
// what it printed after that call (a catch-all reporting the unwinding) is cut, since a real exit
// would have printed nothing more. Its System.out and System.err are captured while it runs. Used by
// tests/kafka_ref/tools.py. The shutdown hooks a tool registers (Exit.addShutdownHook: the console
// producer closes, so flushes, its producer there) run when it ends, as they would at a JVM's exit.

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.common.utils.internals.Exit;

public final class ToolBatch {
    private static final class ExitCalled extends RuntimeException {
        final int code;

        ExitCalled(int code) {
            super(null, null, false, false);
            this.code = code;
        }
    }

    private static ByteArrayOutputStream out;
    private static ByteArrayOutputStream err;
    private static Integer exitCode;
    private static int outAtExit;
    private static int errAtExit;

    private static synchronized void exitCalled(int code) {
        if (exitCode == null) {
            System.out.flush();
            System.err.flush();
            exitCode = code;
            outAtExit = out.size();
            errAtExit = err.size();
        }
        throw new ExitCalled(code);
    }

    public static void main(String[] argv) throws Exception {
        ObjectMapper json = new ObjectMapper();
        JsonNode commands = json.readTree(System.in);
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        InputStream realIn = System.in;
        Exit.setExitProcedure((code, message) -> exitCalled(code));
        Exit.setHaltProcedure((code, message) -> exitCalled(code));
        List<Runnable> hooks = new ArrayList<>();
        Exit.setShutdownHookAdder((name, hook) -> hooks.add(hook));
        for (JsonNode command : commands) {
            List<String> args = new ArrayList<>();
            command.get("args").forEach(a -> args.add(a.asText()));
            synchronized (ToolBatch.class) {
                out = new ByteArrayOutputStream();
                err = new ByteArrayOutputStream();
                exitCode = null;
            }
            String stdin = command.has("stdin") ? command.get("stdin").asText() : "";
            int code = 0;
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            System.setIn(new ByteArrayInputStream(stdin.getBytes(StandardCharsets.UTF_8)));
            try {
                Method main = Class.forName(command.get("main").asText()).getMethod("main", String[].class);
                main.invoke(null, (Object) args.toArray(new String[0]));
            } catch (InvocationTargetException e) {
                Throwable cause = e.getCause();
                if (!(cause instanceof ExitCalled)) {
                    code = 1;
                    cause.printStackTrace(System.err);
                }
            } finally {
                for (Runnable hook : hooks) {
                    try {
                        hook.run();
                    } catch (Throwable t) {
                        t.printStackTrace(System.err);
                    }
                }
                hooks.clear();
                System.out.flush();
                System.err.flush();
                System.setOut(realOut);
                System.setErr(realErr);
                System.setIn(realIn);
            }
            String outText, errText;
            synchronized (ToolBatch.class) {
                byte[] o = out.toByteArray(), e = err.toByteArray();
                if (exitCode != null) {
                    code = exitCode;
                    o = java.util.Arrays.copyOf(o, outAtExit);
                    e = java.util.Arrays.copyOf(e, errAtExit);
                }
                outText = new String(o, StandardCharsets.UTF_8);
                errText = new String(e, StandardCharsets.UTF_8);
            }
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("code", code);
            result.put("out", outText);
            result.put("err", errText);
            realOut.println(json.writeValueAsString(result));
            realOut.flush();
        }
        Exit.resetExitProcedure();
        System.exit(0);
    }
}
