// DynamoDB Local listening on one address: its command line has a port option but no address
// option, and its Jetty connector listens on every interface by default.
//
//   java -Djava.library.path=DynamoDBLocal_lib -cp DynamoDBLocal.jar DynamoDBLocalOn.java \
//        <address> <DynamoDB Local's own options>...
//
// Builds the server exactly as DynamoDB Local's main does, sets the address on its
// connectors before they open, then starts it. Reflection only, so it compiles (Java's
// single-file launcher) with nothing on the class path.

import java.lang.reflect.Field;
import java.util.Arrays;

public class DynamoDBLocalOn {
    public static void main(String[] args) throws Exception {
        if (args.length < 1) {
            System.err.println("usage: DynamoDBLocalOn.java <address> [DynamoDB Local options]...");
            System.exit(2);
        }
        String address = args[0];
        String[] options = Arrays.copyOfRange(args, 1, args.length);
        Class<?> runner = Class.forName("software.amazon.dynamodb.services.local.main.ServerRunner");
        Object proxy = runner.getMethod("createServerFromCommandLineArgs", String[].class)
                .invoke(null, (Object) options);
        if (proxy == null) {
            return; // -help or -version: DynamoDB Local has printed what was asked
        }
        Field field = proxy.getClass().getDeclaredField("server");
        field.setAccessible(true);
        Object server = field.get(proxy);
        Object[] connectors = (Object[]) server.getClass().getMethod("getConnectors").invoke(server);
        if (connectors.length == 0) {
            throw new IllegalStateException("DynamoDB Local built a server without a connector");
        }
        for (Object c : connectors) {
            c.getClass().getMethod("setHost", String.class).invoke(c, address);
        }
        proxy.getClass().getMethod("start").invoke(proxy);
        System.out.println("DynamoDB Local listening on " + address);
        proxy.getClass().getMethod("join").invoke(proxy);
    }
}
